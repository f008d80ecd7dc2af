//! deletion-cost-operator's offline readers: what `kubectl get -o json|yaml`
//! prints (a `List`/`*List`, a single object, an array of objects, or several
//! YAML documents), read into the core's types: pods for `predict`, a cluster
//! snapshot for `plan`, policy files, prices files; and the CRD rendered as
//! YAML. Errors name the source, the item and the field. Pure: the CLI opens
//! files and stdin (`cli::source`) and hands over a reader or text. The core
//! decides; this crate only reads.

// The core's modules and helpers under the names the readers were written with.
pub(crate) use deletion_cost_core::text::{
    capped_list, json_problem, shortened, without_os_error, LISTED,
};
pub(crate) use deletion_cost_core::{annotations, comparator, pod};

mod crd;
mod documents;
mod error;
mod limits;
mod notes;
mod pods;
mod policy_file;
mod prices;
mod read;
mod snapshot;
mod stream;
mod version;

pub use crd::{crd_yaml, CrdError};
pub use policy_file::{parse_policies, policies_from, PolicyFileError, PolicyObject};
pub use prices::{parse_prices, PricesError};
pub use snapshot::{ReadSnapshot, SnapshotReader};

pub use documents::*;
pub use error::*;
pub use limits::*;
pub use notes::*;
pub use pods::*;
pub use read::*;
pub use stream::pods_from_reader;
pub(crate) use stream::{stream_items, ItemSink, Streamed};
pub use version::*;

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::comparator::slim::SlimPod;
    use crate::comparator::KubeVersion;

    /// A snapshot past serde-saphyr's default budget (250,000 nodes, 1,024
    /// documents) parses; what guards against a small text expanding (aliases,
    /// depth) still refuses.
    #[test]
    fn yaml_limits_grow_with_the_text_but_not_expansion() {
        let item = |i: usize| {
            format!("- kind: Pod\n  metadata: {{name: p{i}, namespace: s, labels: {{app: web, tier: a, zone: b}}}}\n")
        };
        let list: String = std::iter::once("kind: List\nitems:\n".to_string())
            .chain((0..30_000).map(item))
            .collect();
        assert_eq!(parse_objects("big.yaml", &list).unwrap().len(), 30_000);
        let docs: String = (0..2_000)
            .map(|i| format!("---\nkind: Pod\nmetadata: {{name: p{i}}}\n"))
            .collect();
        assert_eq!(parse_objects("docs.yaml", &docs).unwrap().len(), 2_000);
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
            let next = ["b", "c", "d", "e", "f", "g", "h", "i"][i];
            bomb.push_str(&format!(
                "{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let e = parse_objects("bomb.yaml", &bomb).unwrap_err().to_string();
        assert!(e.contains("bomb.yaml: not valid YAML"), "{e}");
        let deep = format!("a: {}{}\n", "[".repeat(70), "]".repeat(70));
        let e = parse_objects("deep.yaml", &deep).unwrap_err().to_string();
        assert!(e.contains("nested too deeply"), "{e}");
    }

    #[test]
    fn forms() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let objs = parse_objects("f.json", list).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "items[1]");
        let pods = pods_from(&objs).unwrap();
        assert_eq!(pods[0].metadata.name.as_deref(), Some("a"));

        let arr = r#"[{"metadata":{"name":"a"}}]"#;
        assert_eq!(parse_objects("f", arr).unwrap()[0].location, "[0]");

        let yaml = "kind: Pod\nmetadata:\n  name: y\n---\nkind: Pod\nmetadata:\n  name: z\n";
        let objs = parse_objects("f.yaml", yaml).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].location, "document 2");
    }

    /// The typed fast path answers exactly as the general path, and leaves
    /// every error to it.
    #[test]
    fn parse_pods_matches_the_general_path() {
        let general = |t: &str| {
            parse_objects("f.json", t)
                .and_then(|o| pods_from(&o))
                .and_then(|p| {
                    if p.is_empty() {
                        Err(no_pods("f.json", t))
                    } else {
                        Ok(p)
                    }
                })
        };
        let cases = [
            r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod","metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
            r#"{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[]}"#,
            r#"{"items":[{"metadata":{"name":"a"}}]}"#,
            r#"  [{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#,
            r#"{"kind":"List","items":null}"#,
            r#"{"kind":"List","items":[{"kind":"List","items":[{"metadata":{"name":"n"}}]}]}"#,
            r#"[[{"metadata":{"name":"a"}}]]"#,
            r#"{"kind":"Pod","metadata":{"name":"a"},"items":[]}"#,
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#,
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#,
            r#"{"kind":"PodList","items":[{"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#,
            r#"{"kind":"List","items":[3]}"#,
            r#"{"kind":"List","items":[]} trailing"#,
            "kind: Pod\nmetadata:\n  name: y\n",
            r#"[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]"#,
            r#"{"kind":"List","items":[{"metadata":{"name":"a","uid":"u"}},{"metadata":{"name":"b","uid":"u"}}]}"#,
            r#"[{}]"#,
            "",
        ];
        for text in cases {
            match (parse_pods("f.json", text), general(text)) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: fast {a:?} vs general {b:?}"),
            }
        }
    }

    /// The slim path answers as the whole one, with slimmed pods.
    #[test]
    fn parse_pods_slim_matches_parse_pods() {
        let full = r#"{"kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"s","uid":"u","labels":{"x":"y"},"annotations":{"other":"1","controller.kubernetes.io/pod-deletion-cost":"5"},"creationTimestamp":"2025-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","controller":true}]},"spec":{"nodeName":"n","containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"p","image":"i","restartPolicy":"Always"}]},"status":{"phase":"Running","podIP":"1.2.3.4","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}],"containerStatuses":[{"name":"c","image":"i","imageID":"x","ready":true,"restartCount":3}],"initContainerStatuses":[{"name":"p","image":"i","imageID":"x","ready":true,"restartCount":1}]}}]}"#;
        let slim = parse_pods_slim("f.json", full).unwrap();
        // what the comparator reads, already computed
        assert_eq!(slim[0].cost_annotation.as_deref(), Some("5"));
        assert_eq!((slim[0].restarts, slim[0].sidecar_restarts), (3, 1));
        assert!(slim[0].ready && slim[0].ready_time.is_some());
        assert_eq!(slim[0].owner.as_ref().map(|o| &*o.name), Some("rs"));
        let yaml = "kind: Pod\nmetadata: {name: y, annotations: {a: b}}\n";
        for text in [
            full,
            yaml,
            r#"[{"metadata":{"name":"a"}},{"kind":"Pod","apiVersion":"v1"}]"#,
            r#"{"kind":"List","items":[{"apiVersion":"v2","kind":"Pod"}]}"#,
            r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#,
            r#"[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]"#,
            r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"x"}}]}"#,
            "[]",
            "",
        ] {
            match (parse_pods_slim("f.json", text), parse_pods("f.json", text)) {
                (Ok(a), Ok(b)) => {
                    let b: Vec<_> = b.iter().map(SlimPod::from_pod).collect();
                    assert_eq!(a, b, "{text}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
                (a, b) => panic!("{text}: slim {a:?} vs whole {b:?}"),
            }
        }
    }

    #[test]
    fn errors_name_source_item_and_field() {
        let bad = r#"{"kind":"PodList","items":[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":5}]}}]}"#;
        let objs = parse_objects("pods.json", bad).unwrap();
        let err = pods_from(&objs).unwrap_err().to_string();
        assert!(err.contains("pods.json"), "{err}");
        assert!(err.contains("items[0]"), "{err}");
        assert!(err.contains("status.conditions[0].status"), "{err}");

        let err = parse_objects("x.json", "{nope").unwrap_err().to_string();
        assert_eq!(
            err,
            "x.json: not valid JSON at line 1 column 2: key must be a string"
        );
        let err = parse_objects("x.yaml", "a: [").unwrap_err().to_string();
        assert_eq!(
            err,
            "x.yaml: not valid YAML at line 1 column 4: unclosed bracket '['"
        );
        let err = parse_objects("x.yaml", "spec:\n  x: 1\n   y: 2\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "x.yaml: not valid YAML at line 3 column 5: mapping values are not allowed in this context"
        );
        let deep = format!("a: {}{}", "[".repeat(70), "]".repeat(70));
        let err = parse_objects("deep.yaml", &deep).unwrap_err().to_string();
        assert_eq!(
            err,
            "deep.yaml: not valid YAML at line 1 column 67: nested too deeply (more than 64 levels of lists and maps)"
        );
        // issue 55, item 2: past the parser's own limit (255 levels) the same
        // words, not its "recursion limit exceeded"; a key given twice in
        // JSON's words, not the library's option names
        let deeper = format!("a: {}{}", "[".repeat(200_000), "]".repeat(200_000));
        let err = parse_objects("deep.yaml", &deeper).unwrap_err().to_string();
        assert_eq!(
            err,
            "deep.yaml: not valid YAML at line 1 column 259: nested too deeply (more than 64 levels of lists and maps)"
        );
        let deeper = "- ".repeat(300) + "x";
        let err = parse_objects("deep.yaml", &deeper).unwrap_err().to_string();
        assert!(
            err.ends_with("nested too deeply (more than 64 levels of lists and maps)"),
            "{err}"
        );
        let err = parse_objects("x.yaml", "kind: Pod\nmetadata: {name: a}\nkind: Pod\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "x.yaml: not valid YAML at line 3 column 1: kind: given twice (a key may appear once in a map)"
        );
        let err = parse_objects("x.yaml", "42").unwrap_err().to_string();
        assert!(err.contains("found a number"), "{err}");
        let objs = parse_objects("x.yaml", "kind: Node\nmetadata: {name: n}").unwrap();
        assert!(pods_from(&objs)
            .unwrap_err()
            .to_string()
            .contains("expected a Pod"));
    }

    fn pods_err(text: &str) -> String {
        parse_pods("in.json", text).unwrap_err().to_string()
    }

    #[test]
    fn no_pods_is_an_error_naming_the_source() {
        for (text, detail) in [
            ("", "the input is empty"),
            ("  \n\t\n", "the input is empty"),
            ("# nothing\n---\n", "the input holds only comments"),
            ("[]", "the list is empty"),
            (r#"{"kind":"PodList","items":[]}"#, "the list is empty"),
            ("null", "the input holds no object"),
        ] {
            assert_eq!(
                pods_err(text),
                format!("no pods in in.json ({detail})"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn items_that_are_not_pods_are_named() {
        for (text, want) in [
            (
                "{}",
                "in.json: object: not a Pod: no kind and no metadata.name (found an empty object)",
            ),
            (
                r#"{"foo":1}"#,
                "in.json: object: not a Pod: no kind and no metadata.name (found fields foo)",
            ),
            (
                "[{}]",
                "in.json: [0]: not a Pod: no kind and no metadata.name (found an empty object)",
            ),
            (
                r#"{"kind":"Pod"}"#,
                "in.json: object: Pod without metadata.name",
            ),
            (
                "a: b",
                "in.json: object: not a Pod: no kind and no metadata.name (found fields a)",
            ),
            (
                r#"{"kind":"List","items":[{"metadata":{"name":"a"}},{"kind":"Pod","metadata":{"namespace":"x"}}]}"#,
                "in.json: items[1]: Pod without metadata.name",
            ),
        ] {
            assert_eq!(pods_err(text), want, "{text:?}");
        }
    }

    #[test]
    fn duplicates_name_both_items() {
        let err = pods_err(
            r#"{"kind":"List","items":[{"metadata":{"name":"a","namespace":"s"}},{"metadata":{"name":"b","namespace":"s"}},{"metadata":{"name":"a","namespace":"s"}}]}"#,
        );
        assert_eq!(
            err,
            "in.json: items[2] (Pod s/a) repeats in.json: items[0] (Pod s/a): the same name s/a; each pod may appear once"
        );
        let err = pods_err(
            r#"[{"metadata":{"name":"a","uid":"u1"}},{"metadata":{"name":"b","uid":"u1"}}]"#,
        );
        assert_eq!(
            err,
            "in.json: [1] (Pod b) repeats in.json: [0] (Pod a): the same uid u1; each pod may appear once"
        );
        // the same name in two namespaces is two pods; so are two pods without a UID
        let pods = parse_pods(
            "in.json",
            r#"[{"metadata":{"name":"a","namespace":"x"}},{"metadata":{"name":"a","namespace":"y"}},{"metadata":{"name":"b","namespace":"y"}}]"#,
        )
        .unwrap();
        assert_eq!(pods.len(), 3);
        let warning = missing_uid_warning("in.json", &pods).unwrap();
        assert!(
            warning.starts_with("in.json: 3 pod(s) without metadata.uid (x/a, y/a, y/b)"),
            "{warning}"
        );
        let yaml =
            "kind: Pod\nmetadata: {name: a, uid: u}\n---\nkind: Pod\nmetadata: {name: a, uid: v}\n";
        assert!(pods_err(yaml)
            .contains("in.json: document 2 (Pod a) repeats in.json: document 1 (Pod a)"));
    }

    /// A reader that hands out `pattern` forever, `step` bytes at a time.
    struct Endless {
        pattern: &'static [u8],
        at: usize,
        step: usize,
        given: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.step);
            for b in &mut buf[..n] {
                *b = self.pattern[self.at % self.pattern.len()];
                self.at += 1;
            }
            self.given += n;
            Ok(n)
        }
    }

    fn endless(pattern: &'static [u8], step: usize) -> Endless {
        Endless {
            pattern,
            at: 0,
            step,
            given: 0,
        }
    }

    fn read_text(bytes: &[u8], max: u64) -> Result<String, InputError> {
        read_bounded("in", bytes, max, 0, Expect::Manifest)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512Mi"), Ok(512 << 20));
        assert_eq!(parse_size("2Gi"), Ok(DEFAULT_MAX_INPUT_BYTES));
        assert_eq!(parse_size(DEFAULT_MAX_INPUT), Ok(DEFAULT_MAX_INPUT_BYTES));
        assert_eq!(parse_size("64k"), Ok(64_000));
        assert_eq!(parse_size("1G"), Ok(1_000_000_000));
        for bad in ["", "Mi", "1X", "-1", "0", "1.5Gi", "99999999999Ti"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(show_size(2 << 30), "2Gi");
        assert_eq!(show_size(100 << 10), "100Ki");
        assert_eq!(show_size(1000), "1000 bytes");
    }

    #[test]
    fn binary_input_fails_at_its_first_byte() {
        let mut zero = endless(b"\0", usize::MAX);
        let err = read_bounded("/dev/zero", &mut zero, 1 << 30, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "/dev/zero: not valid JSON or YAML at line 1 column 1: a NUL byte is in no JSON or YAML text (binary data?); stopped reading"
        );
        assert!(zero.given <= 64 * 1024, "read {} bytes", zero.given);
        let err = read_text(b"kind: Pod\nmetadata:\x1b[1m", 1 << 20)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "in: not valid JSON or YAML at line 2 column 10: control character 0x1b is in no JSON or YAML text (binary data?); stopped reading");
        let err = read_text(b"a: \xff\xfe", 1 << 20).unwrap_err().to_string();
        assert!(
            err.contains("line 1 column 4: byte 0xff is not UTF-8"),
            "{err}"
        );
        // a UTF-8 sequence cut at the end of the input
        let err = read_text("a: \u{e9}".as_bytes().split_last().unwrap().1, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not UTF-8"), "{err}");
        // tabs, CR LF, a BOM and multi-byte text are fine, even when reads cut them
        let text = "\u{feff}kind: Pod\r\nmetadata:\t{name: caf\u{e9}-\u{1f600}}\n";
        let got = read_bounded("in", OneByte(text.as_bytes()), 1 << 20, 0, Expect::Manifest);
        assert_eq!(got.unwrap(), text);
    }

    /// Hands out one byte per read.
    struct OneByte<'a>(&'a [u8]);

    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            match buf.first_mut() {
                Some(b) => *b = *first,
                None => return Ok(0),
            }
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn input_past_the_limit_stops() {
        assert_eq!(read_text(b"[]", 2).unwrap(), "[]");
        let err = read_text(b"[ ]", 2).unwrap_err().to_string();
        assert_eq!(err, "in: larger than --max-input-bytes 2 bytes: stopped reading (raise --max-input-bytes for a larger input)");
        let mut list = endless(b"{\"a\": 1},\n", 1000);
        let err = read_bounded("<stdin>", &mut list, 100 << 10, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(err.contains("larger than --max-input-bytes 100Ki"), "{err}");
        assert!(list.given <= (100 << 10) + 1, "read {}", list.given);
    }

    #[test]
    fn endless_scalar_text_stops_after_one_mebibyte() {
        let mut yes = endless(b"y\n", 8192);
        let err = read_bounded("<stdin>", &mut yes, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "<stdin>: object: expected a Kubernetes object, a List or an array, found text (\"y\") going on for more than 1 MiB without a `key:` or `- `; stopped reading");
        assert!(yes.given < 2 << 20, "read {}", yes.given);
        // samples (CSV) are any text: only the limit stops them
        let mut yes = endless(b"y\n", 8192);
        let err = read_bounded("<stdin>", &mut yes, 3 << 20, 0, Expect::Text).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { .. }), "{err}");
        // broken JSON is caught at the same early look
        let mut bad = endless(b"[1 2 ", 8192);
        let err = read_bounded("<stdin>", &mut bad, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("<stdin>: not valid JSON at line 1 column 4"),
            "{err}"
        );
        let mut objects = endless(b"{\"a\": 1},\n", 8192);
        let err = read_bounded("<stdin>", &mut objects, 1 << 40, 0, Expect::Manifest)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not valid JSON at line 1 column 9: trailing characters"),
            "{err}"
        );
    }

    /// The early look never refuses a good input, wherever the read stops.
    #[test]
    fn head_check_accepts_every_prefix_of_good_input() {
        let json = r#"{"kind":"PodList","items":[{"metadata":{"name":"caf\u00e9 \"x\"","n":-1.5e-3,"t":true,"f":false,"z":null},"a":[1,2.0,{"k":[]}]}, {"x": 12345}]}"#;
        let yaml =
            "# c\n%YAML 1.2\n---\napiVersion: v1\nitems:\n- kind: Pod\n  metadata: {name: a}\n";
        for text in [
            json,
            yaml,
            "--- # c\nkind: Pod\n",
            "- a\n- b\n",
            "\"k\": v\n",
            "null\n---\nkind: Pod\n",
        ] {
            for cut in 0..=text.len() {
                if let Some(prefix) = text.get(..cut) {
                    if let Err(e) = head_check("in", prefix.as_bytes()) {
                        panic!("{prefix:?}: {e}");
                    }
                }
            }
        }
        for scalar in ["y\ny\n", "--- y\n", "# c\n\nhello world\nmore"] {
            assert!(head_check("in", scalar.as_bytes()).is_err(), "{scalar:?}");
        }
    }

    #[test]
    fn versions_are_read_apart_from_objects() {
        let text = "clientVersion: {major: \"1\", minor: \"36\"}\nserverVersion:\n  major: \"1\"\n  minor: \"33+\"\n  gitVersion: v1.33.4-eks-1\n---\nkind: Pod\nmetadata: {name: a}\n---\nmetadata: {name: b}\n";
        let objects = parse_objects("s.yaml", text).unwrap();
        let flags: Vec<bool> = objects.iter().map(is_version_object).collect();
        assert_eq!(flags, [true, false, false]);
        let v = server_version(&objects).unwrap().unwrap();
        assert_eq!(v.version, KubeVersion::new(1, 33));
        assert_eq!(v.git_version, "v1.33.4-eks-1");
        assert_eq!(v.at, "s.yaml: document 1");
        // the raw /version body; none at all
        let raw = parse_objects("v.json", r#"{"major":"1","minor":"30"}"#).unwrap();
        assert!(!is_version_object(&raw[0]), "no version key");
        let raw = parse_objects(
            "v.json",
            r#"{"major":"1","minor":"30","gitVersion":"v1.30.1"}"#,
        )
        .unwrap();
        assert_eq!(
            server_version(&raw).unwrap().map(|v| v.git_version),
            Some("v1.30.1".into())
        );
        assert_eq!(server_version(&objects[1..]).unwrap(), None);
        // the same minor twice is one version; two minors are an error
        let same = [objects[0].clone(), objects[0].clone()];
        assert!(server_version(&same).unwrap().is_some());
        let both = [objects[0].clone(), raw[0].clone()];
        let e = server_version(&both).unwrap_err().to_string();
        assert!(e.contains("v.json: object (v1.30.1): another Kubernetes version than s.yaml: document 1 (v1.33.4-eks-1)"), "{e}");
        // kubectl without a server, a version that is none
        for (text, needle) in [
            (
                r#"{"clientVersion":{"major":"1"}}"#,
                "without serverVersion",
            ),
            (
                r#"{"serverVersion":{"major":"x"}}"#,
                "serverVersion is not a Kubernetes version",
            ),
            (
                r#"{"serverVersion":"v1.30"}"#,
                "serverVersion is not a Kubernetes version",
            ),
        ] {
            let o = parse_objects("k.json", text).unwrap();
            let e = server_version(&o).unwrap_err().to_string();
            assert!(
                e.starts_with("k.json: object: ") && e.contains(needle),
                "{e}"
            );
        }
        // predict's reader leaves it out of the pods and hands it back
        let (pods, v) = parse_pods_slim_versioned("s.yaml", text).unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(v.map(|v| v.version), Some(KubeVersion::new(1, 33)));
    }
}
