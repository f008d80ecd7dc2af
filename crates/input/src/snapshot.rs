//! [`SnapshotReader`]: reads what `kubectl get pods,nodes,replicasets,deployments
//! -A -o yaml` prints as the bytes arrive, into the core's [`Snapshot`]
//! sorted by kind.

use std::collections::BTreeSet;
use std::io::Read;
use std::sync::Arc;

use crate::{
    check_object_limits, check_pod_name, check_unique_pods, flatten, is_version_object, item_label,
    json_syntax, note_version, parse_objects, record_within_limits, stream_items, InputError,
    InputLimits, ItemSink, RawObject, ServerVersion, Streamed, MAX_ANNOTATIONS_BYTES,
};
use deletion_cost_core::plan::Snapshot;
use deletion_cost_core::pod::{decode_pod_item, PodRecord};

/// A snapshot read by [`SnapshotReader::finish`].
#[derive(Debug)]
pub struct ReadSnapshot {
    /// The objects.
    pub snapshot: Snapshot,
    /// The cluster's version, when the input carries one.
    pub version: Option<ServerVersion>,
    /// What the input held, in words (`found kind Node, Service`, `the input
    /// is empty`), for an error when it holds no pod.
    pub held: String,
}

/// Reads snapshot files into a [`Snapshot`]. JSON is streamed: each item of
/// a List or array is decoded as it arrives, pods straight into
/// [`PodRecord`]s, so neither the text nor a tree of the whole input is
/// held. YAML is read whole, then taken object by object the same way.
///
/// Errors come in the order a reader of the whole input would find them: a
/// file that is not JSON or YAML (or not a List, an array or an object) at
/// once; then, after every file, a version that differs from another, a Pod
/// without a name, an object that does not decode (naming the item and
/// field), the same pod twice.
pub struct SnapshotReader {
    snapshot: Snapshot,
    /// `file: items[3]` for each pod, for duplicate errors.
    labels: Vec<Box<str>>,
    kinds: BTreeSet<String>,
    objects: usize,
    version: Option<ServerVersion>,
    version_error: Option<InputError>,
    name_error: Option<InputError>,
    decode_error: Option<InputError>,
    shape: Option<InputError>,
    /// About how many bytes the objects hold, and the most they may (the
    /// byte limit: tiny items without end hold no more than their text).
    held: u64,
    limit: u64,
    max_pods: u64,
    fatal: Option<InputError>,
    /// The file being read, and what was gathered before it.
    source_name: String,
    mark: Mark,
}

/// What a [`SnapshotReader`] had gathered when a file began: a repeated
/// `items` key in that file forgets what the file gave so far.
#[derive(Default)]
struct Mark {
    pods: usize,
    nodes: usize,
    replica_sets: usize,
    deployments: usize,
    ignored: Vec<(String, usize)>,
    kinds: BTreeSet<String>,
    objects: usize,
    version: Option<ServerVersion>,
    version_error: bool,
    name_error: bool,
    decode_error: bool,
    held: u64,
}

impl SnapshotReader {
    /// A reader whose objects may hold about `limits.bytes` bytes
    /// (`--max-input-bytes`; each file's text has the same limit) and
    /// `limits.pods` pods across all files (`--max-pods`).
    pub fn new(limits: InputLimits) -> Self {
        Self {
            snapshot: Snapshot::default(),
            labels: Vec::new(),
            kinds: BTreeSet::new(),
            objects: 0,
            version: None,
            version_error: None,
            name_error: None,
            decode_error: None,
            shape: None,
            held: 0,
            limit: limits.bytes,
            max_pods: limits.pods,
            fatal: None,
            source_name: String::new(),
            mark: Mark::default(),
        }
    }

    /// Reads one source, named `source_name` in errors, from `reader`;
    /// `size_hint` is a regular file's length (0 when unknown).
    pub fn read(
        &mut self,
        source_name: &str,
        reader: impl Read,
        size_hint: u64,
    ) -> Result<(), InputError> {
        self.begin(source_name);
        match stream_items(source_name, reader, self.limit, size_hint, self)? {
            Streamed::Items => match self.shape.take() {
                Some(e) => Err(e),
                None => Ok(()),
            },
            Streamed::Text(text) => self.read_text(source_name, &text),
        }
    }

    /// Reads one text already in memory (JSON or YAML).
    pub fn read_text(&mut self, source_name: &str, text: &str) -> Result<(), InputError> {
        self.begin(source_name);
        for o in parse_objects(source_name, text)? {
            self.object(o);
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    fn begin(&mut self, source_name: &str) {
        source_name.clone_into(&mut self.source_name);
        let s = &self.snapshot;
        self.mark = Mark {
            pods: s.pods.len(),
            nodes: s.nodes.len(),
            replica_sets: s.replica_sets.len(),
            deployments: s.deployments.len(),
            ignored: s.ignored.clone(),
            kinds: self.kinds.clone(),
            objects: self.objects,
            version: self.version.clone(),
            version_error: self.version_error.is_some(),
            name_error: self.name_error.is_some(),
            decode_error: self.decode_error.is_some(),
            held: self.held,
        };
    }

    /// Takes one object (lists already flattened).
    fn object(&mut self, o: RawObject) {
        self.objects += 1;
        self.kinds.insert(if o.kind.is_empty() {
            "(no kind)".to_string()
        } else {
            o.kind.clone()
        });
        if is_version_object(&o) {
            note_version(&o, &mut self.version, &mut self.version_error);
            return;
        }
        if self.name_error.is_some() {
            return; // only a version error or a shape error can come first now
        }
        if o.kind == "Pod" {
            if let Err(e) = check_pod_name(&o) {
                self.name_error = Some(e);
                return;
            }
        }
        // Kubernetes' own limits (names, labels, annotations), on what is read
        if matches!(
            o.kind.as_str(),
            "Pod" | "Node" | "ReplicaSet" | "Deployment"
        ) {
            if let Err(e) = check_object_limits(&o) {
                self.name_error = Some(e);
                return;
            }
        }
        if self.decode_error.is_some() {
            return;
        }
        let size = std::mem::size_of::<RawObject>() as u64;
        let decoded = match o.kind.as_str() {
            "Pod" => {
                let label = item_label(&o.source_name, &o.location);
                o.into_decoded::<PodRecord>("Pod")
                    .map(|p| self.push_pod(p, label))
            }
            "Node" => o.into_decoded("Node").map(|n| {
                self.held += 2 * size;
                self.snapshot.nodes.push(Arc::new(n))
            }),
            "ReplicaSet" => o.into_decoded("ReplicaSet").map(|r| {
                self.held += 2 * size;
                self.snapshot.replica_sets.push(r)
            }),
            "Deployment" => o.into_decoded("Deployment").map(|d| {
                self.held += 2 * size;
                self.snapshot.deployments.push(d)
            }),
            other => {
                let kind = if other.is_empty() { "(no kind)" } else { other };
                let ignored = &mut self.snapshot.ignored;
                match ignored.iter_mut().find(|(k, _)| k == kind) {
                    Some((_, n)) => *n += 1,
                    None => ignored.push((kind.to_string(), 1)),
                }
                Ok(())
            }
        };
        if let Err(e) = decoded {
            self.decode_error = Some(e);
        }
        self.check_limit();
    }

    fn push_pod(&mut self, pod: PodRecord, label: String) {
        if self.snapshot.pods.len() as u64 >= self.max_pods && self.fatal.is_none() {
            self.fatal = Some(InputError::TooManyPods {
                source_name: self.source_name.clone(),
                limit: self.max_pods,
            });
        }
        self.held += record_bytes(&pod) + label.len() as u64;
        self.snapshot.pods.push(Arc::new(pod));
        self.labels.push(label.into_boxed_str());
        self.check_limit();
    }

    fn check_limit(&mut self) {
        if self.held > self.limit && self.fatal.is_none() {
            self.fatal = Some(InputError::TooLarge {
                source_name: self.source_name.clone(),
                limit: self.limit,
                size: None,
            });
        }
    }

    /// The snapshot, once every source is read; the first error, in the
    /// order described on [`SnapshotReader`].
    pub fn finish(mut self) -> Result<ReadSnapshot, InputError> {
        if let Some(e) = self.version_error.or(self.name_error).or(self.decode_error) {
            return Err(e);
        }
        // up to half the records' vector is spare room after its last doubling
        self.snapshot.pods.shrink_to_fit();
        check_unique_pods(
            self.labels
                .iter()
                .map(|l| l.to_string())
                .zip(&self.snapshot.pods),
        )?;
        let held = if self.objects == 0 {
            "the input is empty".to_string()
        } else {
            let kinds: Vec<&str> = self.kinds.iter().map(String::as_str).collect();
            format!("found kind {}", kinds.join(", "))
        };
        Ok(ReadSnapshot {
            snapshot: self.snapshot,
            version: self.version,
            held,
        })
    }
}

/// About what a pod record holds: the record, its strings and maps, with
/// allocator overhead. Labels and owners count once, with the first record
/// that holds them (the others share them).
fn record_bytes(p: &PodRecord) -> u64 {
    let m = &p.identity;
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let shared = if Arc::strong_count(&p.shared) == 1 {
        let labels = p.labels().into_iter().flatten();
        let owners = p.owner_references().into_iter().flatten();
        labels.map(|(k, v)| k.len() + v.len() + 64).sum::<usize>()
            + owners
                .map(|o| o.name.len() + o.uid.len() + o.kind.len() + o.api_version.len() + 200)
                .sum::<usize>()
    } else {
        0
    };
    let ours = [&p.ours.deletion_cost, &p.ours.policy];
    (std::mem::size_of::<PodRecord>()
        + text(&m.name)
        + text(&m.namespace)
        + text(&m.uid)
        + ours.into_iter().map(|s| text(s) + 32).sum::<usize>()
        + shared
        + 256) as u64
}

impl ItemSink for SnapshotReader {
    fn item(&mut self, raw: &str, location: String) {
        if self.shape.is_some() {
            return; // only the first shape error is ever reported
        }
        // the fast path keeps no annotations, so cannot check their total
        let fast = raw.len() <= MAX_ANNOTATIONS_BYTES;
        if fast && self.name_error.is_none() && self.decode_error.is_none() {
            let within = |p: &PodRecord| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                record_within_limits(p, node)
            };
            if let Some(pod) = decode_pod_item(raw).filter(within) {
                self.objects += 1;
                if !self.kinds.contains("Pod") {
                    self.kinds.insert("Pod".to_string());
                }
                self.push_pod(pod, item_label(&self.source_name, &location));
                return;
            }
        }
        match serde_json::from_str(raw) {
            Ok(value) => self.value(value, location),
            // raw text is valid JSON already; kept as a syntax error if not
            Err(e) => self.shape = Some(json_syntax(&self.source_name, &e)),
        }
    }

    fn value(&mut self, value: serde_json::Value, location: String) {
        let mut objects = Vec::new();
        if let Err(e) = flatten(&self.source_name, location, value, &mut objects) {
            self.shape = Some(e);
            return;
        }
        for o in objects {
            self.object(o);
        }
    }

    fn reset(&mut self) {
        let m = std::mem::take(&mut self.mark);
        let s = &mut self.snapshot;
        s.pods.truncate(m.pods);
        self.labels.truncate(m.pods);
        s.nodes.truncate(m.nodes);
        s.replica_sets.truncate(m.replica_sets);
        s.deployments.truncate(m.deployments);
        s.ignored.clone_from(&m.ignored);
        self.kinds.clone_from(&m.kinds);
        self.objects = m.objects;
        self.version.clone_from(&m.version);
        if !m.version_error {
            self.version_error = None;
        }
        if !m.name_error {
            self.name_error = None;
        }
        if !m.decode_error {
            self.decode_error = None;
        }
        self.held = m.held;
        self.shape = None;
        self.mark = m;
    }

    fn has_shape(&self) -> bool {
        self.shape.is_some()
    }

    fn set_shape(&mut self, e: InputError) {
        self.shape = Some(e);
    }

    fn take_fatal(&mut self) -> Option<InputError> {
        self.fatal.take()
    }

    fn stopped(&self) -> bool {
        self.fatal.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a read came to, comparable: each kind's names, ignored kinds,
    /// version and what the input held; or the error.
    fn outcome(r: Result<ReadSnapshot, InputError>) -> Result<String, String> {
        let r = r.map_err(|e| e.to_string())?;
        let names = |it: &mut dyn Iterator<Item = Option<&String>>| {
            it.map(|n| n.map_or("", String::as_str).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let s = &r.snapshot;
        Ok(format!(
            "pods {} | nodes {} | rs {} | deploy {} | ignored {:?} | version {:?} | {} | {:?}",
            names(&mut s.pods.iter().map(|p| p.identity.name.as_ref())),
            names(&mut s.nodes.iter().map(|p| p.metadata.name.as_ref())),
            names(&mut s.replica_sets.iter().map(|p| p.metadata.name.as_ref())),
            names(&mut s.deployments.iter().map(|p| p.metadata.name.as_ref())),
            s.ignored,
            r.version,
            r.held,
            s.pods,
        ))
    }

    fn whole(files: &[&str]) -> Result<String, String> {
        let mut reader = SnapshotReader::new(InputLimits::bytes(1 << 20));
        for (i, text) in files.iter().enumerate() {
            let checked = crate::read_bounded(
                &format!("f{i}.json"),
                text.as_bytes(),
                1 << 20,
                0,
                crate::Expect::Manifest,
            )
            .map_err(|e| e.to_string())?;
            reader
                .read_text(&format!("f{i}.json"), &checked)
                .map_err(|e| e.to_string())?;
        }
        outcome(reader.finish())
    }

    fn streamed(files: &[&str]) -> Result<String, String> {
        let mut reader = SnapshotReader::new(InputLimits::bytes(1 << 20));
        for (i, text) in files.iter().enumerate() {
            reader
                .read(&format!("f{i}.json"), text.as_bytes(), 0)
                .map_err(|e| e.to_string())?;
        }
        outcome(reader.finish())
    }

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"s","uid":"u","labels":{"x":"y"},"annotations":{"other":"1","controller.kubernetes.io/pod-deletion-cost":"5"},"creationTimestamp":"2025-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","controller":true}]},"spec":{"nodeName":"n","containers":[{"name":"c","image":"i"}],"initContainers":[{"name":"p","image":"i","restartPolicy":"Always"}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}],"containerStatuses":[{"name":"c","image":"i","imageID":"x","ready":true,"restartCount":3}]}}"#;

    /// Streaming JSON answers as reading the whole text does, errors and
    /// their order included, across one or several files.
    #[test]
    fn streaming_answers_as_the_whole_text() {
        let node = r#"{"kind":"Node","metadata":{"name":"n"}}"#;
        let rs = r#"{"kind":"ReplicaSet","apiVersion":"apps/v1","metadata":{"name":"rs"}}"#;
        let version = r#"{"serverVersion":{"major":"1","minor":"33","gitVersion":"v1.33.1"}}"#;
        let other = r#"{"gitVersion":"v1.30.0"}"#;
        let p = |name: &str| {
            format!(r#"{{"kind":"Pod","metadata":{{"name":"{name}","uid":"{name}"}}}}"#)
        };
        let list = |items: &[&str]| format!(r#"{{"kind":"List","items":[{}]}}"#, items.join(","));
        let cases: Vec<Vec<String>> = vec![
            vec![list(&[POD, node, rs])],
            vec![format!("[{POD},{node}]")],
            vec![POD.into()],
            vec![list(&[node]), list(&[POD])],
            vec![list(&[POD]), list(&[POD])],
            vec![list(&[version, POD]), list(&[other])],
            vec![list(&[POD, other]), list(&[version, version])],
            vec![list(&[other]), format!("[{version},{other}]")],
            vec![list(&[
                r#"{"kind":"Pod","metadata":{}}"#,
                r#"{"kind":"Node","metadata":5}"#,
            ])],
            vec![list(&[
                r#"{"kind":"Node","metadata":5}"#,
                r#"{"kind":"Pod","metadata":{}}"#,
            ])],
            vec![
                list(&[r#"{"kind":"Node","metadata":5}"#]),
                list(&[r#"{"kind":"Pod"}"#]),
            ],
            vec![list(&[
                r#"{"kind":"Pod","apiVersion":"v2","metadata":{"name":"a"}}"#,
            ])],
            vec![list(&[
                r#"{"kind":"Pod","metadata":{"name":"a"},"status":{"phase":5}}"#,
            ])],
            vec![list(&[
                r#"{"kind":"Pod","metadata":{"name":"a"},"spec":{"containers":5}}"#,
            ])],
            vec![list(&[
                &p("a"),
                &p("b"),
                r#"{"kind":"Service","metadata":{"name":"s"}}"#,
                "{}",
            ])],
            vec![list(&[&p("a"), "3"])],
            vec![list(&[r#"{"kind":"Pod"}"#, "3"])],
            vec![list(&[&p("a")]), "[3]".into()],
            vec![list(&[&p("a")]), "{".into()],
            vec![format!(
                r#"{{"items":[{}],"kind":"List","items":[{}]}}"#,
                p("a"),
                p("b")
            )],
            vec![
                list(&[&p("a")]),
                format!(
                    r#"{{"items":[{}],"kind":"List","items":[{}]}}"#,
                    p("a"),
                    p("b")
                ),
            ],
            vec![
                list(&[&p("a")]),
                format!(r#"{{"items":[{{"kind":"Pod"}}],"items":[{}]}}"#, p("b")),
            ],
            vec![format!(
                r#"{{"items":[{}],"kind":"Pod","metadata":{{"name":"c"}}}}"#,
                p("a")
            )],
            vec![list(&[&p("a"), &list(&[&p("b")])])],
            vec![r#"{"kind":"List","items":5}"#.into()],
            vec![r#"{"kind":"List","items":[]}"#.into()],
            vec![list(&[node])],
            vec!["[]".into(), "{}".into()],
            vec![list(&[
                &p("a"),
                r#"{"kind":"Pod","metadata":{"name":"b","uid":"a"}}"#,
            ])],
            vec!["kind: Pod\nmetadata:\n  name: y\n".into(), list(&[&p("a")])],
            vec![list(&[
                &p("a"),
                r#"{"kind":"Pod","metadata":{"name":"b","name":"c"}}"#,
            ])],
        ];
        for files in &cases {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            assert_eq!(streamed(&files), whole(&files), "{files:?}");
        }
        // the same files as YAML (streamed when a file is one mapping)
        let mut yaml_files = 0;
        for files in &cases {
            let Some(yaml) = files
                .iter()
                .map(|f| serde_json::from_str::<serde_json::Value>(f).ok())
                .map(|v| v.and_then(|v| serde_saphyr::to_string(&v).ok()))
                .collect::<Option<Vec<String>>>()
            else {
                continue;
            };
            yaml_files += yaml.len();
            let yaml: Vec<&str> = yaml.iter().map(String::as_str).collect();
            assert_eq!(streamed(&yaml), whole(&yaml), "{yaml:?}");
        }
        assert!(yaml_files >= 20, "{yaml_files} YAML files");
    }

    /// The first error of each kind, in the order: version, Pod without a
    /// name, an object that does not decode, the same pod twice.
    #[test]
    fn errors_come_in_the_whole_inputs_order() {
        let e = |files: &[&str]| streamed(files).unwrap_err();
        let bad_node = r#"{"kind":"Node","metadata":5}"#;
        let nameless = r#"{"kind":"Pod","metadata":{}}"#;
        let pod = r#"{"kind":"Pod","metadata":{"name":"a"}}"#;
        let v1 = r#"{"gitVersion":"v1.30.0"}"#;
        let v2 = r#"{"gitVersion":"v1.31.0"}"#;
        assert!(e(&[&format!("[{bad_node},{nameless}]")]).contains("f0.json: [1]"));
        assert!(e(&[&format!("[{pod},{bad_node},{pod}]")]).contains("[1] (Node"));
        assert!(e(&[
            &format!("[{pod},{pod}]"),
            &format!("[{v1}]"),
            &format!("[{v2}]")
        ])
        .contains("v1.30.0"));
        assert_eq!(
            e(&[&format!("[{pod}]"), &format!("[{pod}]")]),
            "f1.json: [0] (Pod a) repeats f0.json: [0] (Pod a): the same name a; each pod may appear once"
        );
    }

    /// Records count against the byte limit: many tiny pods stop the read
    /// long before their text would.
    #[test]
    fn records_count_against_the_limit() {
        let items: Vec<String> = (0..200)
            .map(|i| format!(r#"{{"kind":"Pod","metadata":{{"name":"p{i}"}}}}"#))
            .collect();
        let text = format!("[{}]", items.join(","));
        assert!(text.len() < 16 << 10);
        let mut reader = SnapshotReader::new(InputLimits::bytes(32 << 10));
        let e = reader.read("f.json", text.as_bytes(), 0).unwrap_err();
        assert!(
            e.to_string().contains("larger than --max-input-bytes 32Ki"),
            "{e}"
        );
        let mut reader = SnapshotReader::new(InputLimits::bytes(1 << 20));
        reader.read("f.json", text.as_bytes(), 0).unwrap();
        assert_eq!(reader.finish().unwrap().snapshot.pods.len(), 200);
    }

    /// More pods than `--max-pods`, across files, stop the read: endless
    /// valid input ends there.
    #[test]
    fn pods_past_the_limit_stop_the_read() {
        let items: Vec<String> = (0..10)
            .map(|i| format!(r#"{{"kind":"Pod","metadata":{{"name":"p{i}"}}}}"#))
            .collect();
        let limits = InputLimits {
            bytes: 1 << 20,
            pods: 15,
        };
        let text = format!("[{}]", items.join(","));
        let mut reader = SnapshotReader::new(limits);
        reader.read("f0.json", text.as_bytes(), 0).unwrap();
        let e = reader.read("f1.json", text.as_bytes(), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f1.json: more than --max-pods 15 pods: stopped reading (Kubernetes supports \
             150,000 in a cluster; raise --max-pods for a larger input)"
        );
        // YAML is read whole, then stops the same way
        let yaml: String = (0..16)
            .map(|i| format!("---\nkind: Pod\nmetadata: {{name: y{i}}}\n"))
            .collect();
        let mut reader = SnapshotReader::new(limits);
        let e = reader.read("f.yaml", yaml.as_bytes(), 0).unwrap_err();
        assert!(e.to_string().contains("more than --max-pods 15"), "{e}");
        let mut reader = SnapshotReader::new(limits);
        reader.read("f.json", text.as_bytes(), 0).unwrap();
        assert_eq!(reader.finish().unwrap().snapshot.pods.len(), 10);
    }
}
