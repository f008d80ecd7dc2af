//! Reading utilisation samples from text: a samples file given to
//! `deletion-cost plan --samples FILE`, or the body of a Prometheus
//! instant-query answer. Pure: the caller reads the file or the HTTP body.
//!
//! # Accepted forms
//!
//! The form is recognised from the content, not from the file name.
//!
//! 1. **A saved Prometheus answer** — what
//!    `curl -s 'http://prometheus:9090/api/v1/query' --data-urlencode 'query=...'`
//!    prints:
//!    ```json
//!    {"status":"success","data":{"resultType":"vector","result":[
//!      {"metric":{"pod":"web-1"},"value":[1700000000.0,"0.42"]}]}}
//!    ```
//!    Pods are found by the signal's `podLabel` (default `pod`); series without
//!    that label are ignored and counted. Values `"NaN"`, `"+Inf"`, `"-Inf"` are
//!    read as such and later reported as unusable samples.
//! 2. **The simple JSON form**:
//!    ```json
//!    {"samples": [{"pod": "web-1", "value": 0.42},
//!                 {"pod": "web-2", "value": "NaN", "timestamp": 1700000000}]}
//!    ```
//!    `value` is a JSON number or a string holding a number, `NaN`, `+Inf` or
//!    `-Inf` (`Infinity` too, as in every form); `timestamp` (optional) is
//!    Unix seconds and is used for `maxAge`.
//! 3. **CSV** with a header line `pod,value` or `pod,value,timestamp`; blank
//!    lines and lines starting with `#` are skipped; fields are not quoted.
//!    ```text
//!    pod,value
//!    web-1,0.42
//!    web-2,NaN
//!    ```
//! 4. **Several utilisation signals**: an object keyed by the signal's index in
//!    the policy's `signals` list, each value being form 1 or 2:
//!    ```json
//!    {"signals": {"1": {"samples": [{"pod": "web-1", "value": 0.42}]},
//!                 "3": {"status": "success", "data": {"resultType": "vector", "result": []}}}}
//!    ```
//!    Forms 1–3 apply to the policy's only utilisation signal; a policy with
//!    several needs form 4.
//!
//! A pod listed twice, a NaN or infinite value, and a sample older than the
//! signal's `maxAge` (when a timestamp and the plan's `now` are known) become
//! unusable samples, as they do when Prometheus is queried live.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{SignalSamples, UtilizationSamples};

/// A problem with a samples file; every variant names the file and where in it.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplesError {
    /// The file is not well-formed JSON.
    #[error("{file}: not valid JSON at line {line} column {column}: {problem}")]
    Syntax {
        /// File name as given by the user.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON parser said.
        problem: String,
    },
    /// A JSON value is not what the form needs.
    #[error("{file}: {path}: {problem}")]
    Json {
        /// File name as given by the user.
        file: String,
        /// JSON path of the offending value, e.g. `samples[2].value`.
        path: String,
        /// What is wrong, quoting the value.
        problem: String,
    },
    /// A CSV line is wrong.
    #[error("{file}: line {line}: {problem}")]
    Csv {
        /// File name as given by the user.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong, quoting the value.
        problem: String,
    },
    /// A saved Prometheus answer that cannot be used.
    #[error("{file}: {path}{source}")]
    Prometheus {
        /// File name as given by the user.
        file: String,
        /// JSON path prefix (`signals."1": ` or empty).
        path: String,
        /// What is wrong with the answer.
        source: ResponseError,
    },
    /// The file's samples do not fit the policy's utilisation signals.
    #[error("{file}: {problem}")]
    Signals {
        /// File name as given by the user.
        file: String,
        /// What does not fit.
        problem: String,
    },
}

/// A problem with a Prometheus instant-query answer (HTTP body or saved file).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ResponseError {
    /// Prometheus answered `"status": "error"` (e.g. bad PromQL).
    #[error("Prometheus reported an error ({error_type}): {message}")]
    Api {
        /// Prometheus's `errorType`, e.g. `bad_data`.
        error_type: String,
        /// Prometheus's `error` message.
        message: String,
    },
    /// The query did not return an instant vector.
    #[error(
        "the query returned a {result_type} result, but a vector (one series per pod) is needed"
    )]
    ResultType {
        /// `matrix`, `scalar`, `string` or anything else Prometheus sent.
        result_type: String,
    },
    /// The body is not a Prometheus API answer.
    #[error("{path}: {problem}")]
    Body {
        /// JSON path of the offending value (`$` for the whole body).
        path: String,
        /// What is wrong, quoting the value.
        problem: String,
    },
}

/// One series of a Prometheus instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSeries {
    /// The series' labels (`__name__` included when present).
    pub labels: BTreeMap<String, String>,
    /// Sample value (NaN and infinities kept).
    pub value: f64,
    /// Sample time, Unix seconds.
    pub timestamp: f64,
}

/// A successful instant-query answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryResponse {
    /// The vector's series, in the order Prometheus sent them.
    pub series: Vec<PromSeries>,
    /// Prometheus's `warnings`, if any.
    pub warnings: Vec<String>,
}

/// One pod's value from the simple JSON or CSV form.
#[derive(Debug, Clone, PartialEq)]
pub struct PodValue {
    /// Pod name.
    pub pod: String,
    /// Value (NaN and infinities kept).
    pub value: f64,
    /// Sample time, Unix seconds, when given.
    pub timestamp: Option<f64>,
}

/// Samples of one signal as read, before they are mapped to pods.
#[derive(Debug, Clone, PartialEq)]
pub enum RawSamples {
    /// Simple JSON or CSV form: pod names given directly.
    ByPod(Vec<PodValue>),
    /// A saved Prometheus answer: pods are found by the signal's `podLabel`.
    Prometheus(Vec<PromSeries>),
}

/// Samples mapped to pods.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mapped {
    /// Pod name -> sample.
    pub samples: UtilizationSamples,
    /// Series ignored because they lack the pod label.
    pub without_pod_label: usize,
}

impl RawSamples {
    /// Maps the samples to pods: by name, or by `pod_label` for Prometheus
    /// series. Staleness is judged against `now_secs` and `max_age_secs`.
    pub fn to_utilization(
        &self,
        pod_label: &str,
        now_secs: Option<f64>,
        max_age_secs: Option<f64>,
    ) -> Mapped {
        match self {
            RawSamples::ByPod(values) => Mapped {
                samples: UtilizationSamples::from_series(
                    values.iter().map(|v| (v.pod.clone(), v.value, v.timestamp)),
                    now_secs,
                    max_age_secs,
                ),
                without_pod_label: 0,
            },
            RawSamples::Prometheus(series) => map_series(series, pod_label, now_secs, max_age_secs),
        }
    }
}

/// Maps Prometheus series to pods by `pod_label`; series without it are
/// counted, not used.
pub fn map_series(
    series: &[PromSeries],
    pod_label: &str,
    now_secs: Option<f64>,
    max_age_secs: Option<f64>,
) -> Mapped {
    let mut without_pod_label = 0;
    let mut triples = Vec::with_capacity(series.len());
    for s in series {
        match s.labels.get(pod_label) {
            Some(pod) if !pod.is_empty() => triples.push((pod.clone(), s.value, Some(s.timestamp))),
            _ => without_pod_label += 1,
        }
    }
    Mapped {
        samples: UtilizationSamples::from_series(triples, now_secs, max_age_secs),
        without_pod_label,
    }
}

/// A samples file as read: one set of samples, or one per signal index.
#[derive(Debug, Clone, PartialEq)]
pub enum SamplesFile {
    /// Forms 1–3: for the policy's only utilisation signal.
    Single(RawSamples),
    /// Form 4: signal index -> samples.
    PerSignal(BTreeMap<usize, RawSamples>),
}

/// What the caller knows of one utilisation signal of the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalSpec {
    /// Index in the policy's `signals`.
    pub index: usize,
    /// Label that holds the pod name (policy default `pod`).
    pub pod_label: String,
    /// The signal's `maxAge` in seconds, if any.
    pub max_age_secs: Option<f64>,
}

/// Samples for a plan, with what was left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadedSamples {
    /// Samples by signal index.
    pub samples: SignalSamples,
    /// Signal index -> series ignored for lacking the pod label.
    pub without_pod_label: BTreeMap<usize, usize>,
}

impl SamplesFile {
    /// Assigns the samples to the policy's utilisation signals (`signals`)
    /// and maps them to pods; staleness is judged against `now_secs`.
    pub fn into_signal_samples(
        self,
        file: &str,
        signals: &[SignalSpec],
        now_secs: Option<f64>,
    ) -> Result<LoadedSamples, SamplesError> {
        let by_index: BTreeMap<usize, RawSamples> = match self {
            SamplesFile::Single(raw) => match signals {
                [only] => BTreeMap::from([(only.index, raw)]),
                [] => {
                    return Err(SamplesError::Signals {
                        file: file.to_string(),
                        problem: "samples were given but the policy has no utilization signal"
                            .to_string(),
                    })
                }
                many => {
                    return Err(SamplesError::Signals {
                        file: file.to_string(),
                        problem: format!(
                            "the policy has {} utilization signals (indexes {}); key the samples by signal index: {{\"signals\": {{\"{}\": ...}}}}",
                            many.len(),
                            join_indexes(many),
                            many[0].index
                        ),
                    })
                }
            },
            SamplesFile::PerSignal(map) => map,
        };
        let mut loaded = LoadedSamples::default();
        for (index, raw) in by_index {
            let Some(spec) = signals.iter().find(|s| s.index == index) else {
                return Err(SamplesError::Json {
                    file: file.to_string(),
                    path: format!("signals.\"{index}\""),
                    problem: format!(
                        "signal {index} is not a utilization signal of the policy (utilization signals: {})",
                        if signals.is_empty() { "none".to_string() } else { join_indexes(signals) }
                    ),
                });
            };
            let mapped = raw.to_utilization(&spec.pod_label, now_secs, spec.max_age_secs);
            if mapped.without_pod_label > 0 {
                loaded
                    .without_pod_label
                    .insert(index, mapped.without_pod_label);
            }
            loaded.samples.utilization.insert(index, mapped.samples);
        }
        Ok(loaded)
    }
}

fn join_indexes(signals: &[SignalSpec]) -> String {
    signals
        .iter()
        .map(|s| s.index.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads a samples file (any form) and assigns it to the policy's
/// utilisation signals. `file` is only used in messages.
pub fn read_samples(
    file: &str,
    text: &str,
    signals: &[SignalSpec],
    now_secs: Option<f64>,
) -> Result<LoadedSamples, SamplesError> {
    parse_samples(file, text)?.into_signal_samples(file, signals, now_secs)
}

/// Parses a samples file in any of the forms of the module documentation.
pub fn parse_samples(file: &str, text: &str) -> Result<SamplesFile, SamplesError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match text.trim_start().chars().next() {
        Some('{') | Some('[') => parse_json_file(file, text),
        Some(_) => parse_csv(file, text).map(SamplesFile::Single),
        None => Err(SamplesError::Signals {
            file: file.to_string(),
            problem: "the file is empty".to_string(),
        }),
    }
}

fn parse_json_file(file: &str, text: &str) -> Result<SamplesFile, SamplesError> {
    let value: Value = serde_json::from_str(text).map_err(|e| SamplesError::Syntax {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        // the position is said once, before the problem
        problem: crate::text::json_problem(&e),
    })?;
    let json_err = |path: String, problem: String| SamplesError::Json {
        file: file.to_string(),
        path,
        problem,
    };
    let Value::Object(top) = &value else {
        return Err(json_err(
            "$".to_string(),
            format!(
                "expected an object with \"samples\", \"signals\" or a Prometheus answer, found {}",
                describe(&value)
            ),
        ));
    };
    if let Some(signals) = top.get("signals") {
        if let Some(other) = top.keys().find(|k| *k != "signals") {
            return Err(json_err(
                other.clone(),
                "unexpected key next to \"signals\"".to_string(),
            ));
        }
        let Value::Object(entries) = signals else {
            return Err(json_err(
                "signals".to_string(),
                format!(
                    "expected an object keyed by signal index, found {}",
                    describe(signals)
                ),
            ));
        };
        let mut map = BTreeMap::new();
        for (key, entry) in entries {
            let index: usize = key.parse().map_err(|_| {
                json_err(
                    format!("signals.\"{key}\""),
                    format!("key {key:?} is not a signal index (0, 1, 2, ...)"),
                )
            })?;
            let prefix = format!("signals.\"{key}\"");
            map.insert(index, parse_json_form(file, &prefix, entry)?);
        }
        return Ok(SamplesFile::PerSignal(map));
    }
    parse_json_form(file, "", &value).map(SamplesFile::Single)
}

/// One of the JSON forms 1–2 at `prefix` (empty for the top level).
fn parse_json_form(file: &str, prefix: &str, value: &Value) -> Result<RawSamples, SamplesError> {
    let at = JsonAt { file, prefix };
    let Value::Object(obj) = value else {
        return Err(at.err(
            at.path(""),
            format!(
                "expected an object (\"samples\" or a Prometheus answer), found {}",
                describe(value)
            ),
        ));
    };
    if obj.contains_key("status") {
        return match parse_response_value(value) {
            Ok(resp) => Ok(RawSamples::Prometheus(resp.series)),
            Err(source) => Err(SamplesError::Prometheus {
                file: file.to_string(),
                path: if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}: ")
                },
                source,
            }),
        };
    }
    let Some(samples) = obj.get("samples") else {
        return Err(at.err(
            at.path(""),
            format!(
                "expected \"samples\" (simple form), \"status\" (Prometheus answer) or \"signals\"; found keys {}",
                obj.keys().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    if let Some(other) = obj.keys().find(|k| *k != "samples") {
        return Err(at.err(
            at.path(other),
            "unexpected key next to \"samples\"".to_string(),
        ));
    }
    let Value::Array(items) = samples else {
        return Err(at.err(
            at.path("samples"),
            format!("expected an array, found {}", describe(samples)),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(parse_json_sample(&at, i, item)?);
    }
    Ok(RawSamples::ByPod(out))
}

/// Where a JSON form sits in its file, so that its errors name the file and
/// the full path of the offending value.
struct JsonAt<'a> {
    file: &'a str,
    /// Path of the form itself (empty for the top level).
    prefix: &'a str,
}

impl JsonAt<'_> {
    /// The path of `rest` inside the form (`$` for a top-level form itself).
    fn path(&self, rest: &str) -> String {
        match (self.prefix.is_empty(), rest.is_empty()) {
            (true, true) => "$".to_string(),
            (true, false) => rest.to_string(),
            (false, true) => self.prefix.to_string(),
            (false, false) => format!("{}.{rest}", self.prefix),
        }
    }

    /// A [`SamplesError::Json`] at path `path` of this file.
    fn err(&self, path: String, problem: String) -> SamplesError {
        SamplesError::Json {
            file: self.file.to_string(),
            path,
            problem,
        }
    }
}

/// Item `i` of the simple form's `samples` array: `{pod, value, timestamp?}`.
fn parse_json_sample(at: &JsonAt<'_>, i: usize, item: &Value) -> Result<PodValue, SamplesError> {
    let here = |field: &str| {
        if field.is_empty() {
            at.path(&format!("samples[{i}]"))
        } else {
            at.path(&format!("samples[{i}].{field}"))
        }
    };
    let Value::Object(fields) = item else {
        return Err(at.err(
            here(""),
            format!(
                "expected {{\"pod\": ..., \"value\": ...}}, found {}",
                describe(item)
            ),
        ));
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "pod" | "value" | "timestamp"))
    {
        return Err(at.err(
            here(other),
            "unknown field (expected pod, value, timestamp)".to_string(),
        ));
    }
    let pod = match fields.get("pod") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(other) => {
            return Err(at.err(
                here("pod"),
                format!("expected a pod name, found {}", describe(other)),
            ))
        }
        None => return Err(at.err(here("pod"), "missing".to_string())),
    };
    let value =
        json_sample_value(fields.get("value")).map_err(|problem| at.err(here("value"), problem))?;
    let timestamp = json_sample_timestamp(fields.get("timestamp"))
        .map_err(|problem| at.err(here("timestamp"), problem))?;
    Ok(PodValue {
        pod,
        value,
        timestamp,
    })
}

/// A sample's `value`: a JSON number, or a string as Prometheus writes it.
/// The error is the problem only; the caller adds the path.
fn json_sample_value(value: Option<&Value>) -> Result<f64, String> {
    match value {
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| format!("{n} is not a usable number")),
        Some(Value::String(s)) => parse_value(s).ok_or_else(|| format!("{s:?} is not a number")),
        Some(other) => Err(format!(
            "expected a number or a string such as \"NaN\", found {}",
            describe(other)
        )),
        None => Err("missing".to_string()),
    }
}

/// A sample's optional `timestamp` (finite Unix seconds; absent or null: none).
/// The error is the problem only; the caller adds the path.
fn json_sample_timestamp(timestamp: Option<&Value>) -> Result<Option<f64>, String> {
    match timestamp {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(t) if t.is_finite() => Ok(Some(t)),
            _ => Err(format!("{n} is not a Unix time in seconds")),
        },
        Some(other) => Err(format!("expected Unix seconds, found {}", describe(other))),
    }
}

/// The CSV form 3: a header line, then one `pod,value[,timestamp]` per line.
fn parse_csv(file: &str, text: &str) -> Result<RawSamples, SamplesError> {
    let mut rows = CsvRows::new(file, text);
    let Some((header_line, header)) = rows.next_row()? else {
        return Err(SamplesError::Signals {
            file: file.to_string(),
            problem: "the file holds no samples".to_string(),
        });
    };
    let with_timestamp = csv_header_has_timestamp(file, header_line, &header)?;
    let mut out = Vec::new();
    while let Some((n, fields)) = rows.next_row()? {
        out.push(parse_csv_row(file, n, &fields, with_timestamp)?);
    }
    Ok(RawSamples::ByPod(out))
}

/// A [`SamplesError::Csv`] at 1-based `line` of `file`.
fn csv_err(file: &str, line: usize, problem: String) -> SamplesError {
    SamplesError::Csv {
        file: file.to_string(),
        line,
        problem,
    }
}

/// The CSV form's rows with their 1-based lines, blank and comment lines
/// skipped. The header is checked by the caller (case and spacing forgiven),
/// and a row's field count is reported with its line rather than as csv's error.
struct CsvRows<'a> {
    file: &'a str,
    bytes: &'a [u8],
    records: csv::StringRecordsIntoIter<&'a [u8]>,
}

impl<'a> CsvRows<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .flexible(true)
            .from_reader(text.as_bytes());
        CsvRows {
            file,
            bytes: text.as_bytes(),
            records: reader.into_records(),
        }
    }

    /// The 1-based line of the record at `pos`. csv counts neither empty nor
    /// comment lines, and a record's position is where the previous one
    /// ended: step over those lines, then count.
    fn line_at(&self, pos: Option<&csv::Position>) -> usize {
        let bytes = self.bytes;
        let mut at = pos.map_or(0, |p| p.byte() as usize).min(bytes.len());
        loop {
            match bytes.get(at) {
                Some(b'\r' | b'\n') => at += 1,
                Some(b'#') => {
                    at += bytes[at..]
                        .iter()
                        .position(|b| *b == b'\n')
                        .unwrap_or(bytes.len() - at);
                }
                _ => break,
            }
        }
        bytes[..at].iter().filter(|b| **b == b'\n').count() + 1
    }

    /// The next row that holds data, with its line. A row of one empty field
    /// is a line of spaces, and csv sees a comment only at the very start of
    /// a line: skip those, and indented `#` lines.
    fn next_row(&mut self) -> Result<Option<(usize, csv::StringRecord)>, SamplesError> {
        loop {
            let row = match self.records.next() {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(csv_err(
                        self.file,
                        self.line_at(e.position()),
                        e.to_string(),
                    ))
                }
                Some(Ok(r)) => r,
            };
            let line = self.line_at(row.position());
            if (row.len() == 1 && row.get(0) == Some(""))
                || row.get(0).is_some_and(|f| f.starts_with('#'))
            {
                continue;
            }
            return Ok(Some((line, row)));
        }
    }
}

/// Checks the CSV header and says whether rows carry a timestamp.
fn csv_header_has_timestamp(
    file: &str,
    header_line: usize,
    header: &csv::StringRecord,
) -> Result<bool, SamplesError> {
    let columns: Vec<String> = header.iter().map(str::to_ascii_lowercase).collect();
    match columns.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["pod", "value"] => Ok(false),
        ["pod", "value", "timestamp"] => Ok(true),
        _ => Err(csv_err(
            file,
            header_line,
            format!(
                "expected the header \"pod,value\" or \"pod,value,timestamp\", found {:?} (a JSON file must start with '{{')",
                // the first 40 characters: a file of one long line is not echoed whole
                crate::text::shortened(&header.iter().collect::<Vec<_>>().join(","))
            ),
        )),
    }
}

/// One CSV data row at line `n`: pod, value and, with a timestamp column,
/// an optional timestamp.
fn parse_csv_row(
    file: &str,
    n: usize,
    fields: &csv::StringRecord,
    with_timestamp: bool,
) -> Result<PodValue, SamplesError> {
    let expected = if with_timestamp { 3 } else { 2 };
    if fields.len() != expected {
        return Err(csv_err(
            file,
            n,
            format!(
                "expected {expected} fields ({}), found {} in {:?}",
                if with_timestamp {
                    "pod,value,timestamp"
                } else {
                    "pod,value"
                },
                fields.len(),
                crate::text::shortened(&fields.iter().collect::<Vec<_>>().join(","))
            ),
        ));
    }
    if fields[0].is_empty() {
        return Err(csv_err(file, n, "empty pod name".to_string()));
    }
    let value = parse_value(&fields[1]).ok_or_else(|| {
        csv_err(
            file,
            n,
            format!(
                "value {:?} is not a number",
                crate::text::shortened(&fields[1])
            ),
        )
    })?;
    let timestamp = if with_timestamp && !fields[2].is_empty() {
        match fields[2].parse::<f64>() {
            Ok(t) if t.is_finite() => Some(t),
            _ => {
                return Err(csv_err(
                    file,
                    n,
                    format!(
                        "timestamp {:?} is not Unix seconds",
                        crate::text::shortened(&fields[2])
                    ),
                ))
            }
        }
    } else {
        None
    };
    Ok(PodValue {
        pod: fields[0].to_string(),
        value,
        timestamp,
    })
}

/// Parses a sample value as Prometheus writes it: a decimal number, `NaN`,
/// `+Inf`, `-Inf` (also `Inf` and `Infinity`, any case, as Go's ParseFloat
/// and the saved-answer form's reader take them, so every form reads the
/// same text alike).
pub fn parse_value(s: &str) -> Option<f64> {
    let s = s.trim();
    match s.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "+inf" | "inf" | "+infinity" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        // Rust accepts other spellings too ("inFINity", "NaN" in other
        // forms); require a digit so typos like "infinit" or "n/a" are rejected.
        _ if s.chars().any(|c| c.is_ascii_digit()) => s.parse().ok(),
        _ => None,
    }
}

/// Parses the body of a Prometheus `/api/v1/query` answer.
pub fn parse_query_response(body: &str) -> Result<QueryResponse, ResponseError> {
    let value: Value = serde_json::from_str(body).map_err(|e| ResponseError::Body {
        path: "$".to_string(),
        problem: format!("not JSON ({e}): {}", snippet(body)),
    })?;
    parse_response_value(&value)
}

/// The envelope of a Prometheus API answer. The series themselves are the
/// client crate's own `InstantVector`, so the wire format is read in one place.
#[derive(serde::Deserialize)]
struct Answer {
    status: String,
    data: Option<QueryData>,
    #[serde(default)]
    warnings: Vec<Value>,
    #[serde(rename = "errorType")]
    error_type: Option<Value>,
    error: Option<Value>,
}

/// `data` of a query answer; `result` is read once its type is known to be
/// a vector.
#[derive(serde::Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Value,
}

fn parse_response_value(value: &Value) -> Result<QueryResponse, ResponseError> {
    let body_err = |path: &str, problem: String| ResponseError::Body {
        path: path.to_string(),
        problem,
    };
    let path_err = |prefix: &str, e: serde_path_to_error::Error<serde_json::Error>| {
        let path = match e.path().to_string() {
            p if p == "." => prefix.to_string(),
            p if p.starts_with('[') || prefix.is_empty() => format!("{prefix}{p}"),
            p => format!("{prefix}.{p}"),
        };
        body_err(&path, e.into_inner().to_string())
    };
    if !value.is_object() {
        return Err(body_err(
            "$",
            format!("expected a JSON object, found {}", describe(value)),
        ));
    }
    let answer: Answer = serde_path_to_error::deserialize(value).map_err(|e| path_err("", e))?;
    match answer.status.as_str() {
        "success" => {}
        "error" => {
            let text = |v: Option<Value>| match v {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => "(none given)".to_string(),
            };
            return Err(ResponseError::Api {
                error_type: text(answer.error_type),
                message: text(answer.error),
            });
        }
        other => {
            return Err(body_err(
                "status",
                format!("expected \"success\" or \"error\", found {other:?}"),
            ))
        }
    }
    let Some(data) = answer.data else {
        return Err(body_err("data", "missing".to_string()));
    };
    let warnings = answer.warnings;
    if data.result_type != "vector" {
        return Err(ResponseError::ResultType {
            result_type: data.result_type,
        });
    }
    let vector: Vec<InstantSeries> =
        serde_path_to_error::deserialize(&data.result).map_err(|e| path_err("data.result", e))?;
    let series = vector
        .into_iter()
        .map(|v| PromSeries {
            labels: v.metric.into_iter().collect(),
            value: v.value.value,
            timestamp: v.value.timestamp,
        })
        .collect();
    let warnings = warnings
        .into_iter()
        .map(|w| match w {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .collect();
    Ok(QueryResponse { series, warnings })
}

/// One series of an instant vector as Prometheus's HTTP API answers it:
/// `{"metric": {...}, "value": [timestamp, "value"]}` (the layout
/// prometheus-http-query's `InstantVector` reads, read here without the
/// HTTP client that crate brings).
#[derive(serde::Deserialize)]
struct InstantSeries {
    metric: std::collections::HashMap<String, String>,
    value: InstantSample,
}

/// `[timestamp, "value"]`: the value is a float inside a quoted string
/// (`"0.42"`, `"NaN"`, `"+Inf"`).
#[derive(serde::Deserialize)]
struct InstantSample {
    timestamp: f64,
    #[serde(deserialize_with = "quoted_f64")]
    value: f64,
}

fn quoted_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::de::{Error, Unexpected};
    let s = <String as serde::Deserialize>::deserialize(d)?;
    s.parse::<f64>().map_err(|_| {
        D::Error::invalid_value(
            Unexpected::Str(&s),
            &"a float value inside a quoted JSON string",
        )
    })
}

/// Short description of a JSON value for messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The start of a body, for messages.
pub fn snippet(body: &str) -> String {
    const MAX: usize = 200;
    let trimmed = body.trim();
    match trimmed.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &trimmed[..cut]),
        None => format!("{trimmed:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::{Sample, SampleProblem};

    fn one(index: usize) -> Vec<SignalSpec> {
        vec![SignalSpec {
            index,
            pod_label: "pod".to_string(),
            max_age_secs: Some(600.0),
        }]
    }

    fn loaded(text: &str) -> UtilizationSamples {
        let mut l = read_samples("s.json", text, &one(0), Some(1000.0)).unwrap();
        l.samples.utilization.remove(&0).unwrap()
    }

    const PROM: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"pod":"web-1","namespace":"shop"},"value":[1000.5,"0.42"]},
        {"metric":{"pod":"web-2"},"value":[1000.5,"NaN"]},
        {"metric":{"pod":"web-3"},"value":[1000.5,"+Inf"]},
        {"metric":{"pod":"web-4"},"value":[1000.5,"-Inf"]},
        {"metric":{"instance":"x"},"value":[1000.5,"1"]},
        {"metric":{"pod":"web-5"},"value":[1000.5,"1e-3"]}]}}"#;

    #[test]
    fn prometheus_answer() {
        let l = read_samples("s.json", PROM, &one(2), Some(1001.0)).unwrap();
        let s = &l.samples.utilization[&2].by_pod;
        assert_eq!(s["web-1"], Sample::Value(0.42));
        assert_eq!(s["web-2"], Sample::Unusable(SampleProblem::NaN));
        assert_eq!(s["web-3"], Sample::Unusable(SampleProblem::Infinite));
        assert_eq!(s["web-4"], Sample::Unusable(SampleProblem::Infinite));
        assert_eq!(s["web-5"], Sample::Value(0.001));
        assert_eq!(s.len(), 5);
        assert_eq!(l.without_pod_label[&2], 1);
    }

    #[test]
    fn prometheus_answer_custom_pod_label_and_stale() {
        let text = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod_name":"a"},"value":[100,"1"]},
            {"metric":{"pod_name":"b"},"value":[990,"2"]}]}}"#;
        let specs = vec![SignalSpec {
            index: 0,
            pod_label: "pod_name".to_string(),
            max_age_secs: Some(60.0),
        }];
        let l = read_samples("s.json", text, &specs, Some(1000.0)).unwrap();
        let s = &l.samples.utilization[&0].by_pod;
        assert_eq!(s["a"], Sample::Unusable(SampleProblem::Stale));
        assert_eq!(s["b"], Sample::Value(2.0));
        // Without a `now`, staleness cannot be judged.
        let l = read_samples("s.json", text, &specs, None).unwrap();
        assert_eq!(l.samples.utilization[&0].by_pod["a"], Sample::Value(1.0));
    }

    #[test]
    fn prometheus_error_answers() {
        let err = parse_query_response(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#,
        )
        .unwrap_err();
        assert_eq!(
            err,
            ResponseError::Api {
                error_type: "bad_data".to_string(),
                message: "parse error at char 5".to_string()
            }
        );
        for (t, body) in [
            (
                "matrix",
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            ),
            (
                "scalar",
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#,
            ),
            (
                "string",
                r#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#,
            ),
        ] {
            assert_eq!(
                parse_query_response(body).unwrap_err(),
                ResponseError::ResultType {
                    result_type: t.to_string()
                }
            );
        }
        let err = parse_query_response("<html>bad gateway</html>").unwrap_err();
        assert!(
            matches!(&err, ResponseError::Body { path, problem } if path == "$" && problem.contains("bad gateway"))
        );
        let err = parse_query_response(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data.result[0].value[1]: invalid value: string \"abc\", expected a float value inside a quoted JSON string"
        );
        let err = parse_query_response(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":1},"value":[1,"1"]}]}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("data.result[0].metric.pod:"));
    }

    #[test]
    fn prometheus_answer_in_file_names_file() {
        let err = read_samples(
            "saved.json",
            r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            &one(0),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "saved.json: the query returned a matrix result, but a vector (one series per pod) is needed"
        );
        let err = read_samples(
            "saved.json",
            r#"{"signals":{"1":{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}}}"#,
            &one(1),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "saved.json: signals.\"1\": data.result[0].value[1]: invalid value: string \"x\", expected a float value inside a quoted JSON string"
        );
    }

    #[test]
    fn simple_json_form() {
        let s = loaded(
            r#"{"samples":[{"pod":"a","value":0.5},{"pod":"b","value":"NaN"},
                {"pod":"c","value":"+Inf","timestamp":999},{"pod":"d","value":1,"timestamp":1},
                {"pod":"e","value":"0.25"},{"pod":"f","value":1},{"pod":"f","value":2}]}"#,
        );
        assert_eq!(s.by_pod["a"], Sample::Value(0.5));
        assert_eq!(s.by_pod["b"], Sample::Unusable(SampleProblem::NaN));
        assert_eq!(s.by_pod["c"], Sample::Unusable(SampleProblem::Infinite));
        assert_eq!(s.by_pod["d"], Sample::Unusable(SampleProblem::Stale));
        assert_eq!(s.by_pod["e"], Sample::Value(0.25));
        assert_eq!(s.by_pod["f"], Sample::Unusable(SampleProblem::Duplicate));
    }

    #[test]
    fn simple_json_errors() {
        let cases = [
            (r#"{"samples":[{"pod":"a","value":"lots"}]}"#, "s.json: samples[0].value: \"lots\" is not a number"),
            (r#"{"samples":[{"pod":"a"}]}"#, "s.json: samples[0].value: missing"),
            (r#"{"samples":[{"value":1}]}"#, "s.json: samples[0].pod: missing"),
            (r#"{"samples":[{"pod":"a","value":1},{"pod":"b","vaule":1}]}"#, "s.json: samples[1].vaule: unknown field (expected pod, value, timestamp)"),
            (r#"{"samples":[{"pod":7,"value":1}]}"#, "s.json: samples[0].pod: expected a pod name, found 7"),
            (r#"{"samples":[{"pod":"a","value":true}]}"#, "s.json: samples[0].value: expected a number or a string such as \"NaN\", found true"),
            (r#"{"samples":[{"pod":"a","value":1,"timestamp":"now"}]}"#, "s.json: samples[0].timestamp: expected Unix seconds, found \"now\""),
            (r#"{"samples":{}}"#, "s.json: samples: expected an array, found an object"),
            (r#"{"pods":[]}"#, "s.json: $: expected \"samples\" (simple form), \"status\" (Prometheus answer) or \"signals\"; found keys \"pods\""),
            (r#"[1]"#, "s.json: $: expected an object with \"samples\", \"signals\" or a Prometheus answer, found an array of 1"),
            (r#"{"samples":[],"extra":1}"#, "s.json: extra: unexpected key next to \"samples\""),
        ];
        for (text, want) in cases {
            let err = read_samples("s.json", text, &one(0), None).unwrap_err();
            assert_eq!(err.to_string(), want, "for {text}");
        }
        let err =
            read_samples("s.json", "{\"samples\": [\n  {\"pod\": }]}", &one(0), None).unwrap_err();
        assert!(
            matches!(&err, SamplesError::Syntax { file, line: 2, .. } if file == "s.json"),
            "{err:?}"
        );
        // a file cut short names its position once
        let err = read_samples("s.json", "{\"samples\": [", &one(0), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.json: not valid JSON at line 1 column 13: EOF while parsing a list"
        );
        // issue 55, item 2: the depth limit in words, as every other input says it
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let err = read_samples("s.json", &deep, &one(0), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.json: not valid JSON at line 1 column 128: nested too deeply (more than 128 levels of lists and maps)"
        );
    }

    #[test]
    fn csv_form() {
        let s = loaded("# saved by hand\npod,value\n\nweb-1, 0.5\nweb-2,NaN\nweb-3,+Inf\n");
        assert_eq!(s.by_pod["web-1"], Sample::Value(0.5));
        assert_eq!(s.by_pod["web-2"], Sample::Unusable(SampleProblem::NaN));
        assert_eq!(s.by_pod["web-3"], Sample::Unusable(SampleProblem::Infinite));
        let s = loaded("POD,Value,timestamp\r\nweb-1,0.5,10\r\nweb-2,0.7,\r\nweb-1,1,990\r\n");
        assert_eq!(
            s.by_pod["web-1"],
            Sample::Unusable(SampleProblem::Duplicate)
        );
        assert_eq!(s.by_pod["web-2"], Sample::Value(0.7));
        let s = loaded("pod,value\n\"web,1\",0.5\n");
        assert_eq!(s.by_pod["web,1"], Sample::Value(0.5));
        let s = loaded("pod,value,timestamp\nold,0.5,10\n");
        assert_eq!(s.by_pod["old"], Sample::Unusable(SampleProblem::Stale));
    }

    #[test]
    fn csv_errors() {
        let cases = [
            ("pod,value\nweb-1,abc\n", "s.csv: line 2: value \"abc\" is not a number"),
            ("pod,value\nweb-1,0.5\n\nweb-2\n", "s.csv: line 4: expected 2 fields (pod,value), found 1 in \"web-2\""),
            ("pod,value\n,0.5\n", "s.csv: line 2: empty pod name"),
            ("name,util\nweb-1,1\n", "s.csv: line 1: expected the header \"pod,value\" or \"pod,value,timestamp\", found \"name,util\" (a JSON file must start with '{')"),
            ("pod,value,timestamp\nweb-1,1,yesterday\n", "s.csv: line 2: timestamp \"yesterday\" is not Unix seconds"),
            ("# only a comment\n", "s.csv: the file holds no samples"),
            ("# c\n\npod,value\n  # mid\n  \nweb-1,0.5\r\n\nweb-2,x\n", "s.csv: line 8: value \"x\" is not a number"),
            ("   \n", "s.csv: the file is empty"),
        ];
        for (text, want) in cases {
            let err = read_samples("s.csv", text, &one(0), None).unwrap_err();
            assert_eq!(err.to_string(), want, "for {text:?}");
        }
    }

    #[test]
    fn per_signal_form() {
        let text = r#"{"signals":{
            "1":{"samples":[{"pod":"a","value":0.1}]},
            "3":{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[5,"0.9"]}]}}}}"#;
        let specs = vec![
            SignalSpec {
                index: 1,
                pod_label: "pod".into(),
                max_age_secs: None,
            },
            SignalSpec {
                index: 3,
                pod_label: "pod".into(),
                max_age_secs: None,
            },
        ];
        let l = read_samples("s.json", text, &specs, None).unwrap();
        assert_eq!(l.samples.utilization[&1].by_pod["a"], Sample::Value(0.1));
        assert_eq!(l.samples.utilization[&3].by_pod["a"], Sample::Value(0.9));

        // A single form cannot be assigned when there are two signals.
        let err = read_samples("s.json", r#"{"samples":[]}"#, &specs, None).unwrap_err();
        assert_eq!(err.to_string(), "s.json: the policy has 2 utilization signals (indexes 1, 3); key the samples by signal index: {\"signals\": {\"1\": ...}}");
        // An index that is not a utilisation signal.
        let err = read_samples("s.json", text, &specs[..1], None).unwrap_err();
        assert_eq!(err.to_string(), "s.json: signals.\"3\": signal 3 is not a utilization signal of the policy (utilization signals: 1)");
        let err = read_samples(
            "s.json",
            r#"{"signals":{"one":{"samples":[]}}}"#,
            &specs,
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.json: signals.\"one\": key \"one\" is not a signal index (0, 1, 2, ...)"
        );
        let err = read_samples(
            "s.json",
            r#"{"signals":{"1":{"samples":[{"pod":"a","value":"x"}]}}}"#,
            &specs,
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "s.json: signals.\"1\".samples[0].value: \"x\" is not a number"
        );
        let err = read_samples("s.json", r#"{"samples":[]}"#, &[], None).unwrap_err();
        assert!(err.to_string().contains("no utilization signal"));
    }

    #[test]
    fn values_as_prometheus_writes_them() {
        assert!(parse_value("NaN").unwrap().is_nan());
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_value("1e+06"), Some(1e6));
        assert_eq!(parse_value(" -0.5 "), Some(-0.5));
        assert_eq!(parse_value("infinit"), None);
        // as the saved-answer form (and Go's ParseFloat) reads it
        assert_eq!(parse_value("Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_value("-infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_value("n/a"), None);
        assert_eq!(parse_value(""), None);
    }
}
