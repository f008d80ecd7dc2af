//! Node prices for `plan --prices FILE` and the operator's `--prices`: an
//! hourly price per billing class, and optionally per instance type. The
//! file is read by `deletion-cost-input` (`parse_prices`).
//!
//! ```yaml
//! currency: USD
//! billingClasses: {spot: 0.12, on-demand: 0.40, pay-as-you-go: 0.55}
//! instanceTypes: {m6i.large: 0.096}   # optional; wins over billingClasses
//! ```

use std::collections::BTreeMap;
use std::fmt;

/// The highest price a file may give, per node and hour: far above any real
/// price in any currency, low enough that sums cannot overflow.
pub const MAX_PRICE: f64 = 1e9;

/// The fields of a prices file.
pub const FIELDS: [&str; 3] = ["currency", "billingClasses", "instanceTypes"];

/// An amount of money, kept in millionths so sums and differences are exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money {
    micros: i128,
}

impl Money {
    /// No money.
    pub const ZERO: Money = Money { micros: 0 };

    /// The amount of `micros` millionths.
    pub fn from_micros(micros: i128) -> Self {
        Self { micros }
    }

    /// The amount in millionths.
    pub fn micros(self) -> i128 {
        self.micros
    }

    /// The amount as a float (what JSON carries).
    pub fn as_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }

    /// A price as written, rounded to a millionth; `None` unless finite
    /// and between 0 and [`MAX_PRICE`].
    pub fn from_price(price: f64) -> Option<Self> {
        (price.is_finite() && (0.0..=MAX_PRICE).contains(&price)).then(|| Self {
            micros: (price * 1e6).round() as i128,
        })
    }

    /// An amount as [`Money`]'s `Display` writes it (`12.345678`, `-0.50`,
    /// `3`): digits, at most one point and six decimals, an optional
    /// leading `-`; `None` for anything else (a status field edited by
    /// hand, say).
    pub fn parse_amount(text: &str) -> Option<Self> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (whole, frac) = match digits.split_once('.') {
            Some((_, "")) => return None,
            Some(parts) => parts,
            None => (digits, ""),
        };
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || whole.len() > 24
            || frac.len() > 6
            || !all_digits(whole)
            || !all_digits(frac)
        {
            return None;
        }
        let whole: i128 = whole.parse().ok()?;
        let frac: i128 = format!("{frac:0<6}").parse().ok()?;
        let micros = whole.checked_mul(1_000_000)?.checked_add(frac)?;
        Some(Money::from_micros(if negative { -micros } else { micros }))
    }

    /// This amount `n` times (an hourly price over a month).
    pub fn times(self, n: u32) -> Self {
        Self {
            micros: self.micros * i128::from(n),
        }
    }
}

impl std::ops::Add for Money {
    type Output = Money;
    fn add(self, o: Money) -> Money {
        Money::from_micros(self.micros + o.micros)
    }
}

impl std::ops::Sub for Money {
    type Output = Money;
    fn sub(self, o: Money) -> Money {
        Money::from_micros(self.micros - o.micros)
    }
}

impl std::iter::Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, |a, b| a + b)
    }
}

/// Two decimals at least, up to six, without trailing zeros past the
/// second: `0.12`, `0.096`, `87.60`, `-0.000001`.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.micros < 0 { "-" } else { "" };
        let abs = self.micros.unsigned_abs();
        let mut frac = format!("{:06}", abs % 1_000_000);
        while frac.len() > 2 && frac.ends_with('0') {
            frac.pop();
        }
        write!(f, "{sign}{}.{frac}", abs / 1_000_000)
    }
}

impl serde::Serialize for Money {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

/// Where a node's price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PriceFrom {
    /// `instanceTypes`, by the node's `node.kubernetes.io/instance-type`.
    InstanceType,
    /// `billingClasses`, by the node's billing class.
    BillingClass,
}

/// A prices file, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prices {
    /// Where the prices were read from (shown with the savings).
    pub source: String,
    /// `currency`, when given (only shown; amounts are never converted).
    pub currency: Option<String>,
    /// Hourly price per billing class.
    pub billing_classes: BTreeMap<String, Money>,
    /// Hourly price per instance type; wins over the billing class.
    pub instance_types: BTreeMap<String, Money>,
}

impl Prices {
    /// The hourly price of a node: by its instance type when the file
    /// prices it, else by its billing class; `None` when neither is priced.
    pub fn price_of(
        &self,
        instance_type: Option<&str>,
        billing_class: Option<&str>,
    ) -> Option<(Money, PriceFrom)> {
        instance_type
            .and_then(|t| self.instance_types.get(t))
            .map(|&m| (m, PriceFrom::InstanceType))
            .or_else(|| {
                billing_class
                    .and_then(|c| self.billing_classes.get(c))
                    .map(|&m| (m, PriceFrom::BillingClass))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Money {
        Money::from_price(s.parse().unwrap()).unwrap()
    }

    #[test]
    fn money_is_exact_and_shown_plainly() {
        let a = m("0.1") + m("0.2");
        assert_eq!(a, m("0.3"));
        assert_eq!(a.as_f64(), 0.3);
        assert_eq!(m("0.12").times(730).to_string(), "87.60");
        assert_eq!(m("0.096").to_string(), "0.096");
        assert_eq!((m("0") - m("0.000001")).to_string(), "-0.000001");
        assert_eq!(Money::ZERO.to_string(), "0.00");
        assert_eq!(serde_json::to_string(&m("0.096")).unwrap(), "0.096");
        assert_eq!(Money::from_price(-1.0), None);
        assert_eq!(Money::from_price(f64::NAN), None);
    }

    #[test]
    fn an_amount_reads_back_what_display_wrote() {
        for s in [
            "0.00",
            "0.096",
            "87.60",
            "-0.000001",
            "123456789.123456",
            "3",
        ] {
            let m = Money::parse_amount(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(Money::parse_amount(&m.to_string()), Some(m), "{s}");
        }
        assert_eq!(Money::parse_amount("0.096"), Some(m("0.096")));
        assert_eq!(Money::parse_amount("3"), Some(m("3")));
        for bad in [
            "",
            "-",
            ".5",
            "1.",
            "1.2345678",
            "1e3",
            "+1",
            "1,5",
            " 1",
            "NaN",
            "1.-2",
        ] {
            assert_eq!(Money::parse_amount(bad), None, "{bad:?}");
        }
    }
}
