//! HTTP API parameters as Prometheus reads them: form values merged from the body and the query string, and
//! timestamps given as RFC 3339 or as (fractional) Unix seconds.

use crate::error::QuerierError;
use heddle_model::civil::{days_from_civil, days_in_month};

/// The earliest time the API accepts, in milliseconds: Prometheus' `MinTime` (`math.MinInt64/1000 +
/// 62135596801` seconds), the default `start` of the series and label APIs.
pub const MIN_TIME_MS: i64 = (i64::MIN / 1000 + 62_135_596_801) * 1000;
/// The latest time the API accepts, in milliseconds: Prometheus' `MaxTime`, the default `end`.
pub const MAX_TIME_MS: i64 = (i64::MAX / 1000 - 62_135_596_801) * 1000 + 999;
/// How Prometheus formats `MinTime`/`MaxTime` (clients such as Grafana send them back verbatim).
const MIN_TIME_FORMATTED: &str = "-292273086-05-16T16:47:06Z";
const MAX_TIME_FORMATTED: &str = "292277025-08-18T07:12:54.999999999Z";

/// Form values of a request in arrival order: the URL-encoded body first, then the query string (as Go's
/// `Request.ParseForm` merges them).
#[derive(Debug, Default, Clone)]
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub(crate) fn parse(query: Option<&str>, body: &[u8]) -> Self {
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
        if let Some(q) = query {
            pairs.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
        }
        Self(pairs)
    }

    /// The first value of `key`, if given.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value of a repeated `key`, in order.
    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `key` as a timestamp in milliseconds, or `default` when absent or empty.
    pub(crate) fn time(&self, key: &str, default: i64) -> Result<i64, QuerierError> {
        match self.get(key) {
            None | Some("") => Ok(default),
            Some(v) => parse_time(v).ok_or_else(|| {
                QuerierError::BadData(format!(
                    "invalid parameter {key:?}: cannot parse {v:?} to a valid timestamp"
                ))
            }),
        }
    }

    /// `start` and `end` with Prometheus' defaults, checked to be in order.
    pub(crate) fn time_range(&self) -> Result<(i64, i64), QuerierError> {
        let start = self.time("start", MIN_TIME_MS)?;
        let end = self.time("end", MAX_TIME_MS)?;
        if end < start {
            return Err(QuerierError::BadData(
                "invalid parameter \"end\": end timestamp must not be before start time".into(),
            ));
        }
        Ok((start, end))
    }

    /// The optional `limit` parameter: 0 or absent = no limit.
    pub(crate) fn limit(&self) -> Result<usize, QuerierError> {
        match self.get("limit") {
            None | Some("") => Ok(0),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    QuerierError::BadData(format!("invalid parameter \"limit\": {v:?} is not a number >= 0"))
                }),
        }
    }
}

/// Parses a timestamp the way Prometheus' HTTP API does: Unix seconds with an optional fraction (rounded to
/// milliseconds), or RFC 3339 with an optional fraction and a `Z` or `±hh:mm` offset. `None` when invalid or
/// out of range.
pub fn parse_time(s: &str) -> Option<i64> {
    match s {
        MIN_TIME_FORMATTED => return Some(MIN_TIME_MS),
        MAX_TIME_FORMATTED => return Some(MAX_TIME_MS),
        _ => {}
    }
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() {
            return None;
        }
        let whole = secs.trunc();
        let ms = whole * 1000.0 + ((secs - whole) * 1000.0).round();
        // f64 holds every millisecond of Prometheus' range only approximately; reject what cannot be an i64.
        return (ms >= MIN_TIME_MS as f64 && ms <= MAX_TIME_MS as f64).then_some(ms as i64);
    }
    parse_rfc3339(s)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` to milliseconds since the epoch (the fraction is truncated to
/// milliseconds, as Go's `time.Time` to `UnixMilli`).
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, chars: &[u8]| b.get(at).is_some_and(|c| chars.contains(c));
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, min, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut pos = 19;
    let mut millis = 0;
    if sep(pos, b".") {
        pos += 1;
        let digits = b[pos..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        for i in 0..3 {
            millis = millis * 10 + if i < digits { i64::from(b[pos + i] - b'0') } else { 0 };
        }
        pos += digits;
    }
    let offset_secs = match b.get(pos)? {
        b'Z' | b'z' if pos + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if pos + 6 == b.len() && sep(pos + 3, b":") => {
            let (oh, om) = (num(pos + 1, 2)?, num(pos + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_time_cases() {
        let cases: &[(&str, &str, Option<i64>)] = &[
            ("unix seconds", "1700000000", Some(1_700_000_000_000)),
            (
                "fractional seconds rounded to ms",
                "1700000000.1234",
                Some(1_700_000_000_123),
            ),
            ("fraction rounds up", "1.9996", Some(2_000)),
            ("negative seconds", "-1.5", Some(-1_500)),
            ("exponent", "1e3", Some(1_000_000)),
            ("rfc3339 utc", "2023-11-14T22:13:20Z", Some(1_700_000_000_000)),
            (
                "rfc3339 fraction",
                "2023-11-14T22:13:20.123456789Z",
                Some(1_700_000_000_123),
            ),
            (
                "rfc3339 short fraction",
                "2023-11-14T22:13:20.5Z",
                Some(1_700_000_000_500),
            ),
            ("rfc3339 offset", "2023-11-15T00:13:20+02:00", Some(1_700_000_000_000)),
            (
                "rfc3339 negative offset",
                "2023-11-14T21:13:20-01:00",
                Some(1_700_000_000_000),
            ),
            ("epoch", "1970-01-01T00:00:00Z", Some(0)),
            ("before epoch", "1969-12-31T23:59:59Z", Some(-1_000)),
            ("leap day", "2024-02-29T00:00:00Z", Some(1_709_164_800_000)),
            ("prometheus min time", MIN_TIME_FORMATTED, Some(MIN_TIME_MS)),
            ("prometheus max time", MAX_TIME_FORMATTED, Some(MAX_TIME_MS)),
            ("not a time", "yesterday", None),
            ("nan", "NaN", None),
            ("infinite", "+Inf", None),
            ("too large", "1e300", None),
            ("missing zone", "2023-11-14T22:13:20", None),
            ("bad month", "2023-13-14T22:13:20Z", None),
            ("no leap day", "2023-02-29T00:00:00Z", None),
            ("bad hour", "2023-11-14T24:00:00Z", None),
            ("empty fraction", "2023-11-14T22:13:20.Z", None),
            ("trailing junk", "2023-11-14T22:13:20Zx", None),
            ("space separator", "2023-11-14 22:13:20Z", None),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse_time(input), *want, "case {name} ({input:?})");
        }
    }

    #[test]
    fn form_merges_body_then_query() {
        let f = Form::parse(Some("match[]=b&start=1"), b"match%5B%5D=a&end=2+0");
        assert_eq!(f.all("match[]"), ["a", "b"]);
        assert_eq!(f.get("end"), Some("2 0"));
        assert_eq!(f.time("start", 0).unwrap(), 1000);
        assert!(f.time("end", 0).is_err());
        assert_eq!(f.time("missing", 7).unwrap(), 7);
    }

    #[test]
    fn time_range_defaults_and_order() {
        assert_eq!(Form::default().time_range().unwrap(), (MIN_TIME_MS, MAX_TIME_MS));
        let f = Form::parse(Some("start=10&end=5"), b"");
        let err = f.time_range().unwrap_err().to_string();
        assert!(err.contains("end timestamp must not be before start time"), "{err}");
        assert_eq!(Form::parse(Some("limit=3"), b"").limit().unwrap(), 3);
        assert!(Form::parse(Some("limit=-1"), b"").limit().is_err());
    }
}
