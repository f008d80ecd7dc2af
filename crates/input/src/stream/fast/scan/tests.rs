use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::{FastPod, Fields, M};
use super::*;

/// The serde types' answer on the value at the start of `text`: its
/// fields and length, or whether the text ended inside it.
fn by_serde(text: &str) -> Result<(Fields<'_>, usize), bool> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<M<FastPod>>();
    match values.next() {
        Some(Ok(M(p))) => Ok((p.fields(), values.byte_offset())),
        Some(Err(e)) => Err(e.is_eof()),
        None => Err(true),
    }
}

/// Whenever the scan answers, the serde types answer the same; when it
/// says the text is cut, they have no value either (serde_json calls a
/// number cut after its `.` or `e` invalid, not cut: `Cut` only asks for
/// more text, and at the end the reader path gives the error).
fn agrees(text: &str) -> Result<(), TestCaseError> {
    match scan(text) {
        Ok(found) => prop_assert_eq!(Ok(found), by_serde(text), "{}", text),
        Err(Fail::Cut) => prop_assert!(by_serde(text).is_err(), "{}", text),
        Err(Fail::Unsure) => {}
    }
    Ok(())
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[a-z0-9-]{0,12}".prop_map(Value::from),
        1 => Just(json!("a\"b\\u00e9\\n")),
        1 => Just(json!("caf\u{e9} \u{1F600}")),
        1 => Just(json!("x".repeat(300))),
    ]
}

fn time() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (1970u32..2100, 1u32..13, 1u32..32, 0u32..24, 0u32..60, 0u32..61).prop_map(
            |(y, mo, d, h, mi, s)| json!(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"))
        ),
        1 => Just(json!("2025-01-01T00:00:00.5Z")),
        1 => Just(json!("2025-01-01T00:00:00+02:00")),
        1 => Just(json!("0001-01-01T00:00:00Z")),
        1 => Just(json!("yesterday")),
    ]
}

/// A value of the field's type, `null`, or one of another type.
fn field(good: BoxedStrategy<Value>) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        6 => good.prop_map(Some),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => prop_oneof![
            Just(json!(5)),
            Just(json!(true)),
            Just(json!([1, "a"])),
            Just(json!({"a": [1.5e3, null]})),
            Just(json!("s")),
        ].prop_map(Some),
    ]
    .boxed()
}

fn object(fields: Vec<(&'static str, BoxedStrategy<Option<Value>>)>) -> BoxedStrategy<Value> {
    let (names, values): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    (values, prop::option::of(text()))
        .prop_map(move |(values, extra)| {
            let mut o = serde_json::Map::new();
            for (name, v) in names.iter().zip(values) {
                if let Some(v) = v {
                    o.insert(name.to_string(), v);
                }
            }
            if let Some(extra) = extra {
                o.insert("extra".into(), json!({"x": [extra, 1, -2.5e-3, false]}));
            }
            Value::Object(o)
        })
        .boxed()
}

fn list(item: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop::collection::vec(item, 0..3)
        .prop_map(Value::from)
        .boxed()
}

fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!(3)),
        Just(json!(-0)),
        Just(json!(2147483648u64)),
        Just(json!(1.0))
    ]
    .boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    any::<bool>().prop_map(Value::from).boxed()
}

fn map() -> BoxedStrategy<Value> {
    prop::collection::vec((text(), text()), 0..3)
        .prop_map(|kv| {
            let mut m: serde_json::Map<String, Value> = kv
                .into_iter()
                .map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), v))
                .collect();
            m.insert(POD_DELETION_COST.into(), json!("7"));
            Value::Object(m)
        })
        .boxed()
}

fn pod() -> impl Strategy<Value = Value> {
    let owner = object(vec![
        ("apiVersion", field(text().boxed())),
        ("kind", field(text().boxed())),
        ("name", field(text().boxed())),
        ("uid", field(text().boxed())),
        ("controller", field(boolean())),
        ("blockOwnerDeletion", field(boolean())),
    ]);
    let meta = object(vec![
        ("name", field(text().boxed())),
        ("namespace", field(text().boxed())),
        ("uid", field(text().boxed())),
        ("creationTimestamp", field(time().boxed())),
        ("deletionTimestamp", field(time().boxed())),
        ("annotations", field(map())),
        ("labels", field(map())),
        ("ownerReferences", field(list(owner))),
    ]);
    let container = object(vec![
        ("name", field(text().boxed())),
        (
            "restartPolicy",
            field(prop_oneof![Just(json!("Always")), text()].boxed()),
        ),
    ]);
    let spec = object(vec![
        ("nodeName", field(text().boxed())),
        ("initContainers", field(list(container))),
    ]);
    let condition = object(vec![
        (
            "type",
            field(prop_oneof![Just(json!("Ready")), text()].boxed()),
        ),
        (
            "status",
            field(prop_oneof![Just(json!("True")), text()].boxed()),
        ),
        ("lastTransitionTime", field(time().boxed())),
        ("lastProbeTime", field(time().boxed())),
    ]);
    let status_of = || {
        object(vec![
            ("name", field(text().boxed())),
            ("restartCount", field(number())),
            ("ready", field(boolean())),
        ])
    };
    let status = object(vec![
        ("phase", field(text().boxed())),
        ("conditions", field(list(condition))),
        ("containerStatuses", field(list(status_of()))),
        ("initContainerStatuses", field(list(status_of()))),
    ]);
    object(vec![
        (
            "kind",
            field(prop_oneof![Just(json!("Pod")), text()].boxed()),
        ),
        ("apiVersion", field(Just(json!("v1")).boxed())),
        ("metadata", field(meta)),
        ("spec", field(spec)),
        ("status", field(status)),
        ("items", field(Just(json!([])).boxed())),
        ("gitVersion", field(text().boxed())),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// On generated pods, compact and indented, cut short, with a byte
    /// changed, or a field repeated: the scan answers as the serde types
    /// do, or leaves them the answer.
    #[test]
    fn the_scan_answers_as_the_serde_types(
        pod in pod(),
        indented in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        byte in prop::sample::select(&[b'x', b'"', b'\\', b',', b'}', b']', b'1', b' ', b'\n'][..]),
    ) {
        let text = if indented {
            serde_json::to_string_pretty(&pod).unwrap()
        } else {
            pod.to_string()
        };
        agrees(&text)?;
        agrees(&format!("{text} ,{{}}"))?;
        let at = cut.index(text.len() + 1);
        if let Some(head) = text.get(..at) {
            agrees(head)?;
            let mut changed = head.to_string();
            changed.push(char::from(byte));
            changed.push_str(&text[at..].chars().skip(1).collect::<String>());
            agrees(&changed)?;
        }
        // a field repeated: the serde types refuse it
        if let Some(body) = text.strip_prefix('{').filter(|b| b.len() > 1) {
            agrees(&format!("{{\"status\":null,{body}"))?;
            agrees(&format!("{{\"metadata\":{{\"uid\":\"u\",{}", &body[..body.len() - 1]))?;
        }
    }

    /// The timestamps the API server writes, read by hand, are the ones
    /// jiff reads; any other text is left to jiff.
    #[test]
    fn api_times_are_jiffs(
        digits in prop::collection::vec(0u8..10, 14),
        shape in prop::sample::select(&["%%%%-%%-%%T%%:%%:%%Z", "%%%%-%%-%%t%%:%%:%%Z", "%%%%-%%-%%T%%:%%:%%z", "%%%%-%%-%% %%:%%:%%Z"][..]),
    ) {
        let mut d = digits.iter();
        let text: String = shape
            .chars()
            .map(|c| if c == '%' { char::from(b'0' + d.next().copied().unwrap_or(0)) } else { c })
            .collect();
        let jiff = text.parse::<Timestamp>().ok().map(Time);
        match api_time(text.as_bytes()) {
            Some(t) => prop_assert_eq!(Some(t), jiff, "{}", text),
            // left to jiff: another form, or a year or second read by hand nowhere
            None if jiff.is_some() && shape.starts_with("%%%%-%%-%%T") && shape.ends_with('Z') => {
                let year: u32 = text[..4].parse().unwrap();
                prop_assert!(!(1000..=9998).contains(&year) || &text[17..19] == "60", "{}", text);
            }
            None => {}
        }
    }
}

/// `-0` is the float -0.0 to serde_json, which an `i32` refuses: the
/// scan leaves it to the serde types (a generated `json!(-0)` is written
/// `0`, so the text is spelled out here).
#[test]
fn minus_zero_is_no_restart_count() {
    let text = r#"{"metadata":{"name":"a"},"status":{"containerStatuses":[{"restartCount":-0}]}}"#;
    assert!(matches!(scan(text), Err(Fail::Unsure)));
    assert!(by_serde(text).is_err());
    agrees(text).unwrap();
}

#[test]
fn api_times_at_the_edges_of_months_and_years() {
    for text in [
        "2024-02-29T23:59:59Z",
        "2023-02-28T00:00:00Z",
        "2000-02-29T12:00:00Z",
        "1970-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "1000-01-01T00:00:00Z",
        "9998-12-31T23:59:59Z",
    ] {
        let jiff: Timestamp = text.parse().unwrap();
        assert_eq!(api_time(text.as_bytes()), Some(Time(jiff)), "{text}");
    }
    for text in [
        "2023-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2025-04-31T00:00:00Z",
        "2025-13-01T00:00:00Z",
        "2025-00-01T00:00:00Z",
        "2025-01-00T00:00:00Z",
        "2025-01-01T24:00:00Z",
        "2025-01-01T00:60:00Z",
        "2025-01-01T00:00:60Z",
        "2025-01-01T00:00:00",
        "2025-01-01 00:00:00Z",
        "+2025-01-01T00:00:00Z",
    ] {
        assert_eq!(api_time(text.as_bytes()), None, "{text}");
    }
}
