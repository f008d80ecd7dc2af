//! Parsing of `controller.kubernetes.io/pod-deletion-cost`, as upstream's
//! `helper.GetDeletionCostFromPodAnnotations` parses it.

/// Outcome of reading the annotation: upstream only ever uses `value`
/// (0 for anything invalid); `problem` lets us tell the user why. The
/// default, 0 with no problem, is what a pod without the annotation has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedCost {
    /// The cost the comparator uses.
    pub value: i32,
    /// Why the raw value was rejected (upstream silently treats it as 0).
    pub problem: Option<CostProblem>,
}

/// Why an annotation value does not parse upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CostProblem {
    /// Empty, leading `+`, leading zero, space or any non-digit first byte.
    InvalidFirstCharacter,
    /// Not a base-10 integer.
    NotAnInteger,
    /// Outside int32.
    OutOfRange,
}

impl std::fmt::Display for CostProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CostProblem::InvalidFirstCharacter => {
                "must start with '-', a digit 1-9, or be exactly \"0\""
            }
            CostProblem::NotAnInteger => "not a base-10 integer",
            CostProblem::OutOfRange => "outside the int32 range",
        })
    }
}

/// Upstream's `validFirstDigit`: "-", "1".."9", or the string "0" exactly.
fn valid_first_digit(s: &str) -> bool {
    match s.as_bytes().first() {
        None => false,
        Some(b'-') => true,
        Some(b'0') => s == "0",
        Some(c) => c.is_ascii_digit(),
    }
}

/// Go's `strconv.ParseInt(s, 10, 32)`: optional single sign, then one or more
/// ASCII digits (leading zeros allowed after the sign check), no underscores.
fn parse_int32_go(s: &str) -> Result<i32, CostProblem> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CostProblem::NotAnInteger);
    }
    let mut acc: i64 = 0;
    for b in digits.bytes() {
        acc = acc * 10 + i64::from(b - b'0');
        if acc > i64::from(i32::MAX) + 1 {
            return Err(CostProblem::OutOfRange);
        }
    }
    let v = if neg { -acc } else { acc };
    i32::try_from(v).map_err(|_| CostProblem::OutOfRange)
}

/// Parses one annotation value exactly as upstream does.
pub fn parse_deletion_cost(raw: &str) -> ParsedCost {
    if !valid_first_digit(raw) {
        return ParsedCost {
            value: 0,
            problem: Some(CostProblem::InvalidFirstCharacter),
        };
    }
    match parse_int32_go(raw) {
        Ok(value) => ParsedCost {
            value,
            problem: None,
        },
        Err(p) => ParsedCost {
            value: 0,
            problem: Some(p),
        },
    }
}

/// Reads the cost from the value of a pod's cost annotation; absent means 0.
pub fn deletion_cost_of(annotation: Option<&str>) -> ParsedCost {
    match annotation {
        Some(raw) => parse_deletion_cost(raw),
        None => ParsedCost {
            value: 0,
            problem: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> i32 {
        parse_deletion_cost(s).value
    }

    #[test]
    fn upstream_edge_cases() {
        assert_eq!(v("0"), 0);
        assert_eq!(v("-0"), 0);
        assert_eq!(v("007"), 0);
        assert!(parse_deletion_cost("007").problem.is_some());
        assert_eq!(v("+5"), 0);
        assert_eq!(v(" 5"), 0);
        assert_eq!(v("5 "), 0);
        assert_eq!(v("-007"), -7);
        assert_eq!(v("-"), 0);
        assert_eq!(v(""), 0);
        assert_eq!(v("1_000"), 0);
        assert_eq!(v("10"), 10);
        assert_eq!(v("2147483647"), i32::MAX);
        assert_eq!(v("-2147483648"), i32::MIN);
        assert_eq!(v("2147483648"), 0);
        assert_eq!(
            parse_deletion_cost("2147483648").problem,
            Some(CostProblem::OutOfRange)
        );
        assert_eq!(v("-2147483649"), 0);
        assert_eq!(v("99999999999999999999999"), 0);
        assert_eq!(v("-+5"), 0);
        assert_eq!(v("1e3"), 0);
        assert_eq!(v("١"), 0);
    }

    #[test]
    fn absent_is_zero_without_problem() {
        let p = deletion_cost_of(None);
        assert_eq!(
            p,
            ParsedCost {
                value: 0,
                problem: None
            }
        );
    }
}
