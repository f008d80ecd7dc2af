use super::*;
use proptest::prelude::*;
use serde_json::Value;

/// What the YAML reader reads the one entry of `text` (a sequence) as.
fn reader(text: &str) -> Result<Value, String> {
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Array(mut a)) if a.len() == 1 => Ok(a.remove(0)),
        Ok(other) => Err(format!("not one entry: {other}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The fast path's value of the entry at the start of `text`.
fn fast(text: &str, complete: bool) -> Result<Value, Miss> {
    let mut out = String::new();
    entry_to_json(text, 0, complete, &mut out)?;
    Ok(serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")))
}

/// Written out only as the reader reads it (the entry's text, without what
/// follows it); a cut text is `Cut` or the same answer.
fn check(text: &str) -> Result<Value, Miss> {
    let got = fast(text, true);
    match &got {
        Ok(v) => {
            let len = entry_to_json(text, 0, true, &mut String::new()).map_or(0, |i| i.len);
            assert_eq!(Ok(v.clone()), reader(&text[..len]), "{text}");
        }
        Err(Miss::Unsure) => {}
        Err(Miss::Cut) => panic!("cut at the end: {text}"),
    }
    for k in (0..text.len()).filter(|&k| text.is_char_boundary(k)) {
        let cut = fast(&text[..k], false);
        assert!(cut == Err(Miss::Cut) || cut == got, "{k}: {cut:?} {text}");
    }
    got
}

const POD: &str = "\
- apiVersion: v1
  kind: Pod
  metadata:
    annotations:
      controller.kubernetes.io/pod-deletion-cost: \"-5\"
      kubectl.kubernetes.io/last-applied-configuration: |
        {\"apiVersion\":\"v1\",\"kind\":\"Pod\"}
    creationTimestamp: \"2025-01-01T12:00:00Z\"
    labels:
      app: web
      pod-template-hash: 6d4f8c9b7
    name: web-6d4f8c9b7-abcde
    namespace: shop
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: web-6d4f8c9b7
      uid: 0b63d165-f892-40bf-a000-d165f89293ab
    resourceVersion: \"1234\"
    uid: 9e3779b9-7f4a-4001-a000-79b97f4a7c15
  spec:
    containers:
    - args:
      - --port=8080
      image: nginx:1.27
      name: web
      ports:
      - containerPort: 8080
        protocol: TCP
      resources: {}
    nodeName: ip-10-0-1-104.eu-west-1.compute.internal
    tolerations: []
  status:
    conditions:
    - lastProbeTime: null
      lastTransitionTime: '2025-01-01T12:00:07Z'
      status: 'True'
      type: Ready
    containerStatuses:
    - name: web
      ready: true
      restartCount: 3
    phase: Running
    podIP: 10.0.1.7
";

#[test]
fn a_kubectl_pod_is_written_out_as_the_reader_reads_it() {
    let v = check(POD).expect("written out");
    assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(v["status"]["containerStatuses"][0]["restartCount"], 3);
    // after the item: the next entry, and its length
    let two = format!("{POD}# a comment\n\n- kind: Pod\n");
    let mut out = String::new();
    let item = entry_to_json(&two, 0, true, &mut out).unwrap();
    assert_eq!(item.next, Some((0, true)));
    assert!(two[item.len..].starts_with("- kind: Pod"));
    let end = entry_to_json(POD, 0, true, &mut String::new()).unwrap();
    assert_eq!((end.len, end.next), (POD.len(), None));
}

#[test]
fn plain_yaml_is_written_out() {
    let handled = [
        "- a\n",
        "- 12\n",
        "- -7\n",
        "- 0\n",
        "- true\n",
        "- null\n",
        "- ~\n",
        "-\n",
        "- a: 1\n  b:\n  c: x y\n",
        "- a:\n  - 1\n  -\n  - {}\n",
        "- a:\n    - x\n    - z\n  b: []\n",
        "- a: 'it''s'\n",
        "- a: \"x\\ty \\\"q\\\" \\u00e9 \\/\"\n",
        "- a: |\n    x\n\n    y\n\n\n  b: 1\n",
        "- a: |-\n    x\n  b: |\n\n  c: |\n      deeper\n",
        "- a: x # comment\n  # own line\n  b: 'y'  # after\n",
        "- 'q': 1\n  \"d\": 2\n",
        "- a: 2025-01-01T12:00:00Z\n  b: 10.0.0.1\n  c: 1:20\n  d: 9e3779b9-x\n  e: 0b63d165-f\n",
        "- a: http://x:80/y\n  b: inf\n  c: a#b\n  d: é\n  e: a\"b\\c\n",
        "- a: {}\n  b: [] # none\n",
        "- a: >-\n    folded\n    on\n\n    two\n\n\n    three\n  b: >\n    x\n  c: >\n\n    y\n",
        "- a: >\n    x\n   \n    y\n",
        "- imageID: >-\n    registry.example.com/shop/web@sha256:0000000000000000000000000000000000000000000000000007\n  name: web\n",
    ];
    for text in handled {
        assert!(check(text).is_ok(), "{text}");
    }
}

#[test]
fn anything_the_reader_might_read_otherwise_is_left_to_it() {
    let left = [
        "- - \n",
        "- yes\n",
        "- True\n",
        "- NULL\n",
        "- 007\n",
        "- 1.5\n",
        "- 1e3\n",
        "- 0x1F\n",
        "- 1_000\n",
        "- .inf\n",
        "- 12345678901234567890\n",
        "- a: 1\n  a: 2\n",
        "- 'a': 1\n  a: 2\n",
        "- a: &x 1\n  b: *x\n",
        "- a: !!str 1\n",
        "- a: >\n    x\n      more indented\n",
        "- a: |+\n    kept\n\n",
        "- a: |2\n    x\n",
        "- a: long\n    plain\n",
        "- a: 'two\n    lines'\n",
        "- a: {b: 1}\n",
        "- a: [1]\n",
        "- ? a\n  : 1\n",
        "- a:\tb\n",
        "- a: b\r\n",
        "- a: b: c\n",
        "- null: 1\n",
        "- ~: 1\n",
        "- a: \"\\x41\"\n",
        "- a: \"\\ud83d\\ude00\"\n",
        "- \"k\\n\": 1\n",
        "- a: - b\n",
        "- a:\n    b: 1\n  c: 2\n   d: 3\n",
        "- a: |\n   \n    x\n",
    ];
    for text in left {
        assert_eq!(check(text), Err(Miss::Unsure), "{text}");
    }
    // deeper than the reader allows: its error, not ours
    let mut deep = String::from("-");
    for level in 0..MAX_DEPTH + 1 {
        deep.push_str(&format!("\n{}k:", " ".repeat(2 + 2 * level)));
    }
    deep.push_str(" x\n");
    assert_eq!(check(&deep), Err(Miss::Unsure));
}

/// A generated node: plain YAML in the shapes writers print, scalars and
/// keys drawn from the spellings the reader reads in different ways.
#[derive(Debug, Clone)]
enum Node {
    Scalar(&'static str),
    /// Text, stripped, folded.
    Literal(&'static str, bool, bool),
    Map(Vec<(&'static str, Node)>),
    Seq(Vec<Node>, bool),
}

const SCALARS: &[&str] = &[
    "abc",
    "v1",
    "true",
    "True",
    "yes",
    "n",
    "null",
    "~",
    "0",
    "007",
    "12",
    "-5",
    "+5",
    "1.5",
    "1e3",
    "12e",
    "0x1F",
    "0xG",
    "1_000",
    ".inf",
    ".5",
    "2025-01-01T12:00:00Z",
    "10.0.0.1",
    "9e3779b9-7f4a",
    "'q''s'",
    "'x'",
    "\"a\\tb\"",
    "\"\\u00e9\"",
    "\"\\x41\"",
    "a#b",
    "a # c",
    "http://x:1",
    "-a",
    "{}",
    "[]",
    "é",
    "a: b",
    "&a x",
    "*a",
    "!t x",
    "> x",
    "@x",
    "%x",
    "`x`",
    "a,b",
    "x]",
    "'open",
    "\"open",
];

const KEYS: &[&str] = &[
    "a",
    "b",
    "name",
    "app.kubernetes.io/name",
    "'q'",
    "\"k\"",
    "1",
    "yes",
    "null",
    "x y",
    "a:b",
    "_u",
    "/p",
    "'a'",
    "\"a\"",
];

const LITERALS: &[&str] = &[
    "x",
    "x\ny",
    "x\n\ny",
    "  indented",
    "# not a comment",
    "{\"a\":1}",
];

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        4 => proptest::sample::select(SCALARS).prop_map(Node::Scalar),
        1 => (proptest::sample::select(LITERALS), any::<bool>(), any::<bool>())
            .prop_map(|(t, strip, folded)| Node::Literal(t, strip, folded)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec((proptest::sample::select(KEYS), inner.clone()), 0..4)
                .prop_map(Node::Map),
            (proptest::collection::vec(inner, 0..4), any::<bool>())
                .prop_map(|(items, indentless)| Node::Seq(items, indentless)),
        ]
    })
}

/// `node` as the value after `- ` or `key:` at `indent` (the column of the
/// dash or key): on the same line, or on the lines below.
fn write(node: &Node, indent: usize, after_key: bool, out: &mut String) {
    match node {
        Node::Scalar(s) => {
            out.push(' ');
            out.push_str(s);
            out.push('\n');
        }
        Node::Literal(t, strip, folded) => {
            out.push_str(match (*folded, *strip) {
                (false, false) => " |\n",
                (false, true) => " |-\n",
                (true, false) => " >\n",
                (true, true) => " >-\n",
            });
            for line in t.lines() {
                if !line.is_empty() {
                    out.push_str(&" ".repeat(indent + 2));
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        Node::Map(pairs) if pairs.is_empty() => out.push_str(" {}\n"),
        Node::Seq(items, _) if items.is_empty() => out.push_str(" []\n"),
        Node::Map(pairs) => {
            out.push('\n');
            for (k, v) in pairs {
                out.push_str(&" ".repeat(indent + 2));
                out.push_str(k);
                out.push(':');
                write(v, indent + 2, true, out);
            }
        }
        Node::Seq(items, indentless) => {
            out.push('\n');
            let at = if *indentless && after_key {
                indent
            } else {
                indent + 2
            };
            for item in items {
                out.push_str(&" ".repeat(at));
                out.push('-');
                write(item, at, false, out);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any generated entry is written out as the reader reads it, or left
    /// to it; cut anywhere, it is `Cut` or the same answer.
    #[test]
    fn any_entry_is_written_out_as_the_reader_reads_it(node in node(), comment in any::<bool>()) {
        let mut text = String::from("-");
        write(&node, 0, false, &mut text);
        if comment {
            text.push_str("# after\n\n");
        }
        let got = check(&text);
        if reader(&text).is_err() {
            prop_assert_eq!(got, Err(Miss::Unsure), "{}", text);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Malformed text never panics, and an entry is written out only as the
    /// reader reads it.
    #[test]
    fn any_text_after_a_dash_is_safe(body in "[-a-z0-9:#'\" \n|>{}\\[\\]&*!?,.~\t\r]{0,60}") {
        // what follows the entry is the driver's to judge (it hands the
        // rest to the reader): the entry itself must read as the reader reads it
        let _ = check(&format!("- {body}\n"));
    }
}
