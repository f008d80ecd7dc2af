//! The pod item read by hand, byte by byte, into [`Fields`]: what the
//! serde types of `fast` read, without serde's per-field machinery, the
//! vectors of conditions and statuses, or jiff for the timestamps the API
//! server writes. It answers only when the serde types would surely give
//! the same: a syntax error, a field of another type, a repeated field, a
//! key or name with escapes, anything unusual is [`Fail::Unsure`], and the
//! serde types decide.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use super::{Fields, MetaFields, ReadyCondition, SpecFields, StatusFields};
use crate::annotations::POD_DELETION_COST;
use crate::{label_over_limits, MAX_ANNOTATIONS_BYTES, MAX_NAME_BYTES};

/// Why [`scan`] has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::stream) enum Fail {
    /// The text ends inside the item: all of it so far was as expected.
    Cut,
    /// Anything else: the serde types decide.
    Unsure,
}

type Scan<T> = Result<T, Fail>;

/// Deeper than this, ignored values are left to serde_json.
const MAX_DEPTH: usize = 64;

/// The pod item at the start of `text` (which goes on past it) and its
/// length.
pub(in crate::stream) fn scan(text: &str) -> Scan<(Fields<'_>, usize)> {
    let mut c = Cursor { text, at: 0 };
    let fields = c.pod()?;
    Ok((fields, c.at))
}

/// Bytes that end a run of plain string bytes: a quote, a backslash, a
/// control character (which no JSON string holds raw).
static STOPS: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

/// Each known field of an object at most once (serde's derived structs
/// refuse a repeated one).
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, field: u32) -> Scan<()> {
        let bit = 1 << field;
        if self.0 & bit != 0 {
            return Err(Fail::Unsure);
        }
        self.0 |= bit;
        Ok(())
    }
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not taken.
    fn peek(&mut self) -> Scan<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.at) {
            if !matches!(c, b' ' | b'\n' | b'\t' | b'\r') {
                return Ok(c);
            }
            self.at += 1;
        }
        Err(Fail::Cut)
    }

    fn eat(&mut self, c: u8) -> Scan<()> {
        if self.peek()? != c {
            return Err(Fail::Unsure);
        }
        self.at += 1;
        Ok(())
    }

    /// After an object's `{` or a value in it: the next key, or `None` at
    /// its `}`. `first`: no value read yet.
    fn key(&mut self, first: bool) -> Scan<Option<&'a str>> {
        match self.peek()? {
            b'}' => {
                self.at += 1;
                return Ok(None);
            }
            b',' if !first => self.at += 1,
            b'"' if first => {}
            _ => return Err(Fail::Unsure),
        }
        let key = self.plain_string()?;
        self.eat(b':')?;
        Ok(Some(key))
    }

    /// After an array's `[` or an element: whether another element follows.
    fn element(&mut self, first: bool) -> Scan<bool> {
        match self.peek()? {
            b']' => {
                self.at += 1;
                Ok(false)
            }
            b',' if !first => {
                self.at += 1;
                Ok(true)
            }
            _ if first => Ok(true),
            _ => Err(Fail::Unsure),
        }
    }

    /// A string without escapes, borrowed.
    fn plain_string(&mut self) -> Scan<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let b = self.bytes();
        let mut i = start;
        while let Some(&c) = b.get(i) {
            if STOPS[usize::from(c)] {
                if c != b'"' {
                    return Err(Fail::Unsure);
                }
                self.at = i + 1;
                return self.text.get(start..i).ok_or(Fail::Unsure);
            }
            i += 1;
        }
        Err(Fail::Cut)
    }

    /// A string, escapes decoded by serde_json (so exactly as it would).
    fn string(&mut self) -> Scan<Cow<'a, str>> {
        let start = self.at;
        match self.plain_string() {
            Err(Fail::Unsure) => {}
            other => return other.map(Cow::Borrowed),
        }
        self.at = start;
        self.eat(b'"')?;
        let open = self.at - 1;
        self.skip_string_body()?;
        let literal = self.text.get(open..self.at).ok_or(Fail::Unsure)?;
        serde_json::from_str::<String>(literal)
            .map(Cow::Owned)
            .map_err(|_| Fail::Unsure)
    }

    /// `null` (for an `Option`: `None`).
    fn null(&mut self) -> Scan<bool> {
        if self.peek()? != b'n' {
            return Ok(false);
        }
        self.literal(b"null")?;
        Ok(true)
    }

    fn opt_string(&mut self) -> Scan<Option<Cow<'a, str>>> {
        if self.null()? {
            return Ok(None);
        }
        self.string().map(Some)
    }

    fn opt_bool(&mut self) -> Scan<Option<bool>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b't' => self.literal(b"true").map(|()| Some(true)),
            b'f' => self.literal(b"false").map(|()| Some(false)),
            _ => Err(Fail::Unsure),
        }
    }

    /// An `i32` written as an integer (serde_json refuses a fraction or an
    /// exponent for one).
    fn opt_i32(&mut self) -> Scan<Option<i32>> {
        if self.null()? {
            return Ok(None);
        }
        let start = self.at;
        self.skip_number()?;
        let digits = &self.text[start..self.at];
        // serde_json reads `-0` as the float -0.0, which an i32 refuses
        if digits == "-0" || digits.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            return Err(Fail::Unsure);
        }
        digits.parse().map(Some).map_err(|_| Fail::Unsure)
    }

    /// A timestamp as k8s-openapi's `Time` reads it.
    fn opt_time(&mut self) -> Scan<Option<Time>> {
        if self.null()? {
            return Ok(None);
        }
        let text = self.string()?;
        if let Some(t) = api_time(text.as_bytes()) {
            return Ok(Some(t));
        }
        // what `Time`'s deserializer hands the text to
        let de = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&text);
        Timestamp::deserialize(de)
            .map(|t| Some(Time(t)))
            .map_err(|_| Fail::Unsure)
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        let b = self.bytes();
        let end = self.at + word.len();
        match b.get(self.at..end) {
            Some(w) if w == word => {
                self.at = end;
                Ok(())
            }
            // the text ends inside a word that could still be this one
            None if word.starts_with(&b[self.at..]) => Err(Fail::Cut),
            _ => Err(Fail::Unsure),
        }
    }

    /// The rest of a string after its opening quote, escapes checked as
    /// serde_json checks them when it skips a string.
    fn skip_string_body(&mut self) -> Scan<()> {
        let b = self.bytes();
        let mut i = self.at;
        loop {
            let Some(&c) = b.get(i) else {
                return Err(Fail::Cut);
            };
            if !STOPS[usize::from(c)] {
                i += 1;
                continue;
            }
            match c {
                b'"' => {
                    self.at = i + 1;
                    return Ok(());
                }
                b'\\' => {
                    let Some(&e) = b.get(i + 1) else {
                        return Err(Fail::Cut);
                    };
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let Some(hex) = b.get(i + 2..i + 6) else {
                                return Err(Fail::Cut);
                            };
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(Fail::Unsure);
                            }
                            i += 6;
                        }
                        _ => return Err(Fail::Unsure),
                    }
                }
                _ => return Err(Fail::Unsure),
            }
        }
    }

    /// A JSON number: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`.
    fn skip_number(&mut self) -> Scan<()> {
        let b = self.bytes();
        let mut i = self.at;
        let digits = |i: &mut usize| {
            let start = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - start
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            None => return Err(Fail::Cut),
            _ => return Err(Fail::Unsure),
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                return Err(if i == b.len() {
                    Fail::Cut
                } else {
                    Fail::Unsure
                });
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return Err(if i == b.len() {
                    Fail::Cut
                } else {
                    Fail::Unsure
                });
            }
        }
        // a number may go on in the next read
        if i == b.len() {
            return Err(Fail::Cut);
        }
        self.at = i;
        Ok(())
    }

    /// Any JSON value, checked as serde_json checks what it skips.
    fn skip(&mut self, depth: usize) -> Scan<()> {
        if depth > MAX_DEPTH {
            return Err(Fail::Unsure);
        }
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.skip_string_body()
            }
            b'{' => {
                self.at += 1;
                let mut first = true;
                while self.key(first)?.is_some() {
                    self.skip(depth + 1)?;
                    first = false;
                }
                Ok(())
            }
            b'[' => {
                self.at += 1;
                let mut first = true;
                while self.element(first)? {
                    self.skip(depth + 1)?;
                    first = false;
                }
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => Err(Fail::Unsure),
        }
    }

    /// An object (`M<T>`: no array for a struct): calls `field` for each
    /// key after checking it is not repeated; `known` numbers the fields.
    fn object(
        &mut self,
        known: &[&str],
        mut field: impl FnMut(&mut Self, usize) -> Scan<()>,
    ) -> Scan<()> {
        self.eat(b'{')?;
        let mut seen = Seen::default();
        let mut first = true;
        while let Some(key) = self.key(first)? {
            first = false;
            match known.iter().position(|k| *k == key) {
                Some(i) => {
                    seen.first(i as u32)?;
                    field(self, i)?;
                }
                None => self.skip(1)?,
            }
        }
        Ok(())
    }

    /// An `Option<M<T>>`: `null`, or an object as [`Cursor::object`].
    fn opt_object(
        &mut self,
        known: &[&str],
        field: impl FnMut(&mut Self, usize) -> Scan<()>,
    ) -> Scan<bool> {
        if self.null()? {
            return Ok(false);
        }
        self.object(known, field).map(|()| true)
    }

    /// An `Option<Vec<M<T>>>`: `null`, or an array of objects, each read
    /// into a `T` by `field` (as [`Cursor::object`]) and handed to `each`.
    fn opt_objects<T: Default>(
        &mut self,
        known: &[&str],
        field: impl Fn(&mut Self, &mut T, usize) -> Scan<()>,
        mut each: impl FnMut(T),
    ) -> Scan<()> {
        if self.null()? {
            return Ok(());
        }
        self.eat(b'[')?;
        let mut first = true;
        while self.element(first)? {
            first = false;
            let mut item = T::default();
            self.object(known, |c, f| field(c, &mut item, f))?;
            each(item);
        }
        Ok(())
    }

    fn pod(&mut self) -> Scan<Fields<'a>> {
        let mut p = Fields::default();
        const KNOWN: &[&str] = &[
            "kind",
            "apiVersion",
            "metadata",
            "spec",
            "status",
            "items",
            "serverVersion",
            "clientVersion",
            "gitVersion",
        ];
        self.object(KNOWN, |c, f| {
            match f {
                0 => p.kind = c.opt_string()?,
                1 => p.api_version = c.opt_string()?,
                2 => p.metadata = c.meta()?,
                3 => p.spec = c.spec()?,
                4 => p.status = c.status()?,
                // present unless null: an `Option<IgnoredAny>`
                _ => {
                    if !c.null()? {
                        c.skip(1)?;
                        p.other = true;
                    }
                }
            }
            Ok(())
        })?;
        Ok(p)
    }

    fn meta(&mut self) -> Scan<Option<MetaFields<'a>>> {
        let mut m = MetaFields::default();
        const KNOWN: &[&str] = &[
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "annotations",
            "ownerReferences",
            "labels",
        ];
        let present = self.opt_object(KNOWN, |c, f| {
            match f {
                0 => m.name = c.opt_string()?,
                1 => m.namespace = c.opt_string()?,
                2 => m.uid = c.opt_string()?,
                3 => m.created = c.opt_time()?,
                4 => m.deleting = c.opt_time()?.is_some(),
                5 => m.cost = c.annotations()?,
                6 => c.owners(&mut m)?,
                _ => c.labels()?,
            }
            Ok(())
        })?;
        Ok(present.then_some(m))
    }

    /// A map of strings (`null` too), each entry handed to `entry`.
    fn string_map(
        &mut self,
        mut entry: impl FnMut(Cow<'a, str>, Cow<'a, str>) -> Scan<()>,
    ) -> Scan<()> {
        if self.null()? {
            return Ok(());
        }
        self.eat(b'{')?;
        let mut first = true;
        loop {
            match self.peek()? {
                b'}' => {
                    self.at += 1;
                    return Ok(());
                }
                b',' if !first => self.at += 1,
                b'"' if first => {}
                _ => return Err(Fail::Unsure),
            }
            first = false;
            let key = self.string()?;
            self.eat(b':')?;
            let value = self.string()?;
            entry(key, value)?;
        }
    }

    /// Only the deletion cost is kept; the total is Kubernetes' limit.
    fn annotations(&mut self) -> Scan<Option<Cow<'a, str>>> {
        let mut cost = None;
        let mut total = 0usize;
        self.string_map(|k, v| {
            total += k.len() + v.len();
            if total > MAX_ANNOTATIONS_BYTES {
                return Err(Fail::Unsure);
            }
            if k == POD_DELETION_COST {
                // a repeated key: the last counts, as in a map
                cost = Some(v);
            }
            Ok(())
        })?;
        Ok(cost)
    }

    /// Labels are not kept; each must be within Kubernetes' limits.
    fn labels(&mut self) -> Scan<()> {
        self.string_map(|k, v| match label_over_limits(&k, v.len()) {
            Some(_) => Err(Fail::Unsure),
            None => Ok(()),
        })
    }

    fn owners(&mut self, m: &mut MetaFields<'a>) -> Scan<()> {
        const KNOWN: &[&str] = &[
            "apiVersion",
            "kind",
            "name",
            "uid",
            "controller",
            "blockOwnerDeletion",
        ];
        type Owner<'a> = ([Option<Cow<'a, str>>; 3], Option<bool>);
        self.opt_objects(
            KNOWN,
            |c, (owner, controller): &mut Owner<'a>, f| {
                match f {
                    0 => {
                        c.opt_string()?;
                    }
                    1..=3 => owner[f - 1] = c.opt_string()?,
                    4 => *controller = c.opt_bool()?,
                    _ => {
                        c.opt_bool()?;
                    }
                }
                Ok(())
            },
            |([kind, name, uid], controller)| {
                m.long_owner_name |= name.as_deref().unwrap_or_default().len() > MAX_NAME_BYTES;
                if m.controller.is_none() && controller == Some(true) {
                    m.controller = Some([kind, name, uid].map(Option::unwrap_or_default));
                }
            },
        )
    }

    fn spec(&mut self) -> Scan<Option<SpecFields<'a>>> {
        let mut s = SpecFields::default();
        let present = self.opt_object(&["nodeName", "initContainers"], |c, f| {
            match f {
                0 => s.node_name = c.opt_string()?,
                _ => {
                    let mut sidecars = Vec::new();
                    c.opt_objects(
                        &["name", "restartPolicy"],
                        |c, (name, always): &mut (Option<Cow<'a, str>>, bool), f| {
                            match f {
                                0 => *name = c.opt_string()?,
                                _ => *always = c.opt_string()?.as_deref() == Some("Always"),
                            }
                            Ok(())
                        },
                        |(name, always)| {
                            if always {
                                sidecars.push(name.unwrap_or_default());
                            }
                        },
                    )?;
                    s.sidecars = sidecars;
                }
            }
            Ok(())
        })?;
        Ok(present.then_some(s))
    }

    fn status(&mut self) -> Scan<Option<StatusFields<'a>>> {
        let mut s = StatusFields::default();
        const KNOWN: &[&str] = &[
            "phase",
            "conditions",
            "containerStatuses",
            "initContainerStatuses",
        ];
        let present = self.opt_object(KNOWN, |c, f| {
            match f {
                0 => s.phase = c.opt_string()?,
                1 => s.ready = c.ready_condition()?,
                2 => s.restarts = c.restarts(None)?,
                _ => {
                    let mut names = Vec::new();
                    c.restarts(Some(&mut names))?;
                    s.init_restarts = names;
                }
            }
            Ok(())
        })?;
        Ok(present.then_some(s))
    }

    /// The first `Ready` condition's status and lastTransitionTime; every
    /// condition's fields are still read and checked.
    fn ready_condition(&mut self) -> Scan<Option<ReadyCondition<'a>>> {
        const KNOWN: &[&str] = &["type", "status", "lastTransitionTime", "lastProbeTime"];
        type Condition<'a> = (Option<Cow<'a, str>>, Option<Cow<'a, str>>, Option<Time>);
        let mut first_ready = None;
        self.opt_objects(
            KNOWN,
            |c, condition: &mut Condition<'a>, f| {
                match f {
                    0 => condition.0 = c.opt_string()?,
                    1 => condition.1 = c.opt_string()?,
                    2 => condition.2 = c.opt_time()?,
                    _ => {
                        c.opt_time()?;
                    }
                }
                Ok(())
            },
            |(type_, status, time)| {
                if first_ready.is_none() && type_.as_deref() == Some("Ready") {
                    first_ready = Some((status, time));
                }
            },
        )?;
        Ok(first_ready)
    }

    /// The most restarts of the containers listed (`names`: each one's
    /// name and restarts, kept instead).
    fn restarts(&mut self, mut names: Option<&mut Vec<(Cow<'a, str>, i64)>>) -> Scan<i64> {
        let mut most = 0;
        self.opt_objects(
            &["name", "restartCount", "ready"],
            |c, (name, restarts): &mut (Option<Cow<'a, str>>, i64), f| {
                match f {
                    0 => *name = c.opt_string()?,
                    1 => *restarts = i64::from(c.opt_i32()?.unwrap_or_default()),
                    _ => {
                        c.opt_bool()?;
                    }
                }
                Ok(())
            },
            |(name, restarts)| {
                most = most.max(restarts);
                if let Some(names) = names.as_deref_mut() {
                    names.push((name.unwrap_or_default(), restarts));
                }
            },
        )?;
        Ok(most)
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as the API server writes every timestamp, read
/// without jiff's general parser; `None` for any other form or a date out
/// of range (jiff reads those).
fn api_time(s: &[u8]) -> Option<Time> {
    if s.len() != 20
        || s[4] != b'-'
        || s[7] != b'-'
        || s[10] != b'T'
        || s[13] != b':'
        || s[16] != b':'
        || s[19] != b'Z'
    {
        return None;
    }
    let digit = |i: usize| {
        let d = s[i].wrapping_sub(b'0');
        (d < 10).then_some(i64::from(d))
    };
    let two = |i: usize| Some(digit(i)? * 10 + digit(i + 1)?);
    let year = two(0)? * 100 + two(2)?;
    let (month, day) = (two(5)?, two(8)?);
    let (hour, minute, second) = (two(11)?, two(14)?, two(17)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    // years jiff's timestamps hold whatever the day
    if !(1000..=9998).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=days_in_month).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil)
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Timestamp::from_second(seconds).ok().map(Time)
}

#[cfg(test)]
mod tests;
