//! A prices file read strictly from YAML or JSON into the core's [`Prices`]:
//! unknown fields, prices that are not finite numbers between 0 and
//! [`MAX_PRICE`], an entry given twice and a file without any price are
//! errors naming the field. Pure: the caller reads the file.
//!
//! ```yaml
//! currency: USD
//! billingClasses: {spot: 0.12, on-demand: 0.40, pay-as-you-go: 0.55}
//! instanceTypes: {m6i.large: 0.096}   # optional; wins over billingClasses
//! ```

use std::collections::BTreeMap;
use std::fmt;

use deletion_cost_core::plan::prices::{Money, Prices, FIELDS, MAX_PRICE};
use deletion_cost_core::policy::strict::closest;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::{parse_documents_keeping_non_finite, InputError};

/// Reads a prices file's text (`source` names it in errors). Unknown
/// fields, prices that are not finite numbers between 0 and
/// [`MAX_PRICE`], an entry given twice and a file without any price
/// are errors naming the field.
pub fn parse_prices(source: &str, text: &str) -> Result<Prices, PricesError> {
    let docs: Vec<Loose> = parse_documents_keeping_non_finite(source, text)?;
    let mut docs = docs.into_iter().filter(|d| !matches!(d, Loose::Null));
    let (Some(doc), None) = (docs.next(), docs.next()) else {
        let detail = if text.trim().is_empty() {
            "the input is empty".to_string()
        } else {
            "it holds no document, or several: a prices file is one".to_string()
        };
        return Err(PricesError::NoPrices {
            source_name: source.to_string(),
            detail,
        });
    };
    let field = |field: &str, message: String| PricesError::Field {
        source_name: source.to_string(),
        field: field.to_string(),
        message,
    };
    let Loose::Map(entries) = doc else {
        return Err(field(
            "(top level)",
            format!(
                "expected a map of {}; found {}",
                FIELDS.join(", "),
                doc.describe()
            ),
        ));
    };
    let mut out = Prices {
        source: source.to_string(),
        ..Prices::default()
    };
    let mut seen = Vec::new();
    for (key, value) in entries {
        if seen.contains(&key) {
            return Err(field(&key, "given twice".into()));
        }
        seen.push(key.clone());
        if matches!(value, Loose::Null) && FIELDS.contains(&key.as_str()) {
            // an empty field counts as unset, as the API server prunes nulls
            continue;
        }
        match key.as_str() {
            "currency" => match value {
                Loose::Text(c) if !c.trim().is_empty() => out.currency = Some(c),
                other => {
                    return Err(field(
                        &key,
                        format!("must be a currency name; found {}", other.describe()),
                    ))
                }
            },
            "billingClasses" => out.billing_classes = price_map(source, &key, value)?,
            "instanceTypes" => out.instance_types = price_map(source, &key, value)?,
            _ => {
                let message = match closest(&key, &FIELDS) {
                    Some(c) => format!("unknown field; did you mean {c}?"),
                    None => format!("unknown field; known: {}", FIELDS.join(", ")),
                };
                return Err(field(&key, message));
            }
        }
    }
    if out.billing_classes.is_empty() && out.instance_types.is_empty() {
        return Err(PricesError::NoPrices {
            source_name: source.to_string(),
            detail: "neither billingClasses nor instanceTypes gives a price".into(),
        });
    }
    Ok(out)
}

/// `billingClasses` or `instanceTypes`: name -> hourly price.
fn price_map(
    source: &str,
    name: &str,
    value: Loose,
) -> Result<BTreeMap<String, Money>, PricesError> {
    let field = |field: String, message: String| PricesError::Field {
        source_name: source.to_string(),
        field,
        message,
    };
    let Loose::Map(entries) = value else {
        return Err(field(
            name.to_string(),
            format!(
                "expected a map of name to hourly price; found {}",
                value.describe()
            ),
        ));
    };
    let mut out = BTreeMap::new();
    for (key, price) in entries {
        let at = format!("{name}.{key}");
        if key.is_empty() {
            return Err(field(at, "an empty name".into()));
        }
        if out.contains_key(&key) {
            return Err(field(at, "given twice".into()));
        }
        let money = match price {
            Loose::Number(p) => Money::from_price(p).ok_or_else(|| {
                field(
                    at.clone(),
                    format!(
                        "must be a price per hour, a finite number from 0 to {MAX_PRICE:e}; found {}",
                        Loose::Number(p).describe()
                    ),
                )
            })?,
            other => {
                return Err(field(
                    at,
                    format!(
                        "must be a price per hour (a number); found {}",
                        other.describe()
                    ),
                ))
            }
        };
        out.insert(key, money);
    }
    Ok(out)
}

/// Why a prices file was refused; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum PricesError {
    /// Not readable as JSON or YAML.
    #[error(transparent)]
    Input(#[from] InputError),
    /// No prices at all: an empty file, several documents, no price given.
    #[error("{source_name}: no prices ({detail})")]
    NoPrices {
        /// File path or `<stdin>`.
        source_name: String,
        /// What the file held instead.
        detail: String,
    },
    /// A field that is unknown, or whose value is not allowed.
    #[error("{source_name}: {field}: {message}")]
    Field {
        /// File path or `<stdin>`.
        source_name: String,
        /// `billingClasses.spot`, `currency`, an unknown field's name.
        field: String,
        /// What is wrong, quoting the value.
        message: String,
    },
}

/// Any YAML or JSON value, numbers as written: a `serde_json::Value` would
/// read YAML's `.inf` and `.nan` as null and hide what the file says.
#[derive(Debug, Clone, PartialEq)]
enum Loose {
    Null,
    Bool(bool),
    Number(f64),
    Text(String),
    List,
    /// Entries in file order, repeats kept so they can be reported.
    Map(Vec<(String, Loose)>),
}

impl Loose {
    /// The value in words, for messages.
    fn describe(&self) -> String {
        match self {
            Loose::Null => "nothing (null)".into(),
            Loose::Bool(b) => format!("a boolean ({b})"),
            Loose::Number(n) if n.is_nan() => "NaN".into(),
            Loose::Number(n) if n.is_infinite() => {
                format!("{}infinity", if *n < 0.0 { "-" } else { "" })
            }
            Loose::Number(n) if n.abs() < 1e15 => format!("{n}"),
            Loose::Number(n) => format!("{n:e}"),
            Loose::Text(t) => format!("a string ({t:?})"),
            Loose::List => "a list".into(),
            Loose::Map(_) => "a map".into(),
        }
    }

    /// A map key as text (YAML keys may be numbers or booleans).
    fn into_key(self) -> String {
        match self {
            Loose::Text(t) => t,
            Loose::Null => "null".into(),
            Loose::Bool(b) => b.to_string(),
            Loose::Number(n) => n.to_string(),
            Loose::List => "[...]".into(),
            Loose::Map(_) => "{...}".into(),
        }
    }
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Loose;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Loose, E> {
                Ok(Loose::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
                Ok(Loose::Number(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
                Ok(Loose::Number(v as f64))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Loose, E> {
                Ok(Loose::Number(v as f64))
            }
            fn visit_u128<E>(self, v: u128) -> Result<Loose, E> {
                Ok(Loose::Number(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Loose, E> {
                Ok(Loose::Number(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
                Ok(Loose::Text(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Loose, E> {
                Ok(Loose::Text(v))
            }
            fn visit_unit<E>(self) -> Result<Loose, E> {
                Ok(Loose::Null)
            }
            fn visit_none<E>(self) -> Result<Loose, E> {
                Ok(Loose::Null)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Loose, D2::Error> {
                Loose::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::List)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<Loose, Loose>()? {
                    out.push((k.into_key(), v));
                }
                Ok(Loose::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use deletion_cost_core::plan::prices::PriceFrom;

    use super::*;

    fn parse(text: &str) -> Result<Prices, String> {
        parse_prices("prices.yaml", text).map_err(|e| e.to_string())
    }

    fn m(s: &str) -> Money {
        Money::from_price(s.parse().unwrap()).unwrap()
    }

    #[test]
    fn reads_yaml_and_json() {
        let yaml =
            "currency: USD\nbillingClasses: {spot: 0.12, on-demand: 0.40, pay-as-you-go: 0.55}\n\
                    instanceTypes: {m6i.large: 0.096, m6i.xlarge: 1}\n";
        let p = parse(yaml).unwrap();
        assert_eq!(p.currency.as_deref(), Some("USD"));
        assert_eq!(p.billing_classes["on-demand"], m("0.4"));
        assert_eq!(p.instance_types["m6i.xlarge"], m("1"));
        let json = r#"{"currency":"USD","billingClasses":{"spot":0.12,"on-demand":0.40,"pay-as-you-go":0.55},
                       "instanceTypes":{"m6i.large":0.096,"m6i.xlarge":1}}"#;
        let mut q = parse_prices("prices.yaml", json).unwrap();
        q.source = p.source.clone();
        assert_eq!(p, q);
    }

    #[test]
    fn instance_type_wins_over_billing_class() {
        let p = parse("billingClasses: {spot: 0.12}\ninstanceTypes: {m6i.large: 0.096}").unwrap();
        assert_eq!(
            p.price_of(Some("m6i.large"), Some("spot")),
            Some((m("0.096"), PriceFrom::InstanceType))
        );
        assert_eq!(
            p.price_of(Some("c7g.large"), Some("spot")),
            Some((m("0.12"), PriceFrom::BillingClass))
        );
        assert_eq!(p.price_of(Some("c7g.large"), Some("reserved")), None);
        assert_eq!(p.price_of(None, None), None);
    }

    #[test]
    fn refuses_what_it_does_not_know_naming_the_field() {
        let cases = [
            (
                "billingclasses: {spot: 1}",
                "prices.yaml: billingclasses: unknown field; did you mean billingClasses?",
            ),
            (
                "billingClasses: {spot: 1}\nregion: eu",
                "prices.yaml: region: unknown field; known: currency, billingClasses, instanceTypes",
            ),
            (
                "billingClasses: {spot: -0.1}",
                "prices.yaml: billingClasses.spot: must be a price per hour, a finite number from 0 to 1e9; found -0.1",
            ),
            (
                "billingClasses: {spot: .inf}",
                "prices.yaml: billingClasses.spot: must be a price per hour, a finite number from 0 to 1e9; found infinity",
            ),
            (
                "instanceTypes: {m6i.large: .nan}",
                "prices.yaml: instanceTypes.m6i.large: must be a price per hour, a finite number from 0 to 1e9; found NaN",
            ),
            (
                "billingClasses: {spot: 2e9}",
                "prices.yaml: billingClasses.spot: must be a price per hour, a finite number from 0 to 1e9; found 2000000000",
            ),
            (
                "billingClasses: {spot: \"0.12\"}",
                "prices.yaml: billingClasses.spot: must be a price per hour (a number); found a string (\"0.12\")",
            ),
            (
                "billingClasses: {spot: }",
                "prices.yaml: billingClasses.spot: must be a price per hour (a number); found nothing (null)",
            ),
            (
                "billingClasses: [spot]",
                "prices.yaml: billingClasses: expected a map of name to hourly price; found a list",
            ),
            (
                "currency: 5\nbillingClasses: {spot: 1}",
                "prices.yaml: currency: must be a currency name; found 5",
            ),
            (
                "- spot",
                "prices.yaml: (top level): expected a map of currency, billingClasses, instanceTypes; found a list",
            ),
            ("", "prices.yaml: no prices (the input is empty)"),
            (
                "currency: USD",
                "prices.yaml: no prices (neither billingClasses nor instanceTypes gives a price)",
            ),
            (
                "billingClasses: {spot: 1}\n---\nbillingClasses: {spot: 2}",
                "prices.yaml: no prices (it holds no document, or several: a prices file is one)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text}");
        }
        // JSON keeps repeated keys for the check; YAML's reader refuses them
        // itself, said in the same words (issue 55, item 2)
        let twice = parse_prices("p.json", r#"{"billingClasses":{"spot":1,"spot":2}}"#);
        assert_eq!(
            twice.unwrap_err().to_string(),
            "p.json: billingClasses.spot: given twice"
        );
        let twice = parse("billingClasses: {spot: 1, spot: 2}").unwrap_err();
        assert_eq!(
            twice,
            "prices.yaml: not valid YAML at line 1 column 27: spot: given twice (a key may appear once in a map)"
        );
        let syntax = parse("billingClasses: {spot: 1").unwrap_err();
        assert!(
            syntax.starts_with("prices.yaml: not valid YAML at line"),
            "{syntax}"
        );
    }
}
