//! Go-style durations ("10m", "1h30m", "250ms"), as Mimir's YAML and flags use them.

use std::time::Duration;

/// Parses a Go-style duration: one or more `<number><unit>` with units ns, us, µs, ms, s, m, h, d, w, y
/// (d, w, y as Prometheus' model.Duration allows). "0" alone is zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("duration {s:?}: expected a number at {rest:?}"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("duration {s:?}: bad number"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            "w" => 7.0 * 86400.0,
            "y" => 365.0 * 86400.0,
            "" => return Err(format!("duration {s:?}: missing unit (use e.g. 10s, 5m, 2h)")),
            other => return Err(format!("duration {s:?}: unknown unit {other:?}")),
        };
        total += Duration::try_from_secs_f64(value * secs).map_err(|e| format!("duration {s:?}: {e}"))?;
    }
    Ok(total)
}

/// Formats a duration the way [`parse_duration`] reads it, with the largest exact units ("2h", "1m30s", "250ms").
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let mut ms = d.as_millis();
    if ms == 0 {
        return format!("{}ns", d.as_nanos());
    }
    let mut out = String::new();
    for (unit, len) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1000), ("ms", 1)] {
        if ms >= len {
            out.push_str(&format!("{}{unit}", ms / len));
            ms %= len;
        }
    }
    out
}

/// `#[serde(with = "heddle_config::serde_duration")]` for `Duration` fields written as Go-style strings.
pub mod serde_duration {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let cases = [
            ("0", 0),
            ("10s", 10_000),
            ("1h30m", 5_400_000),
            ("250ms", 250),
            ("2h", 7_200_000),
            ("1.5s", 1_500),
            ("1d", 86_400_000),
        ];
        for (s, ms) in cases {
            assert_eq!(parse_duration(s).unwrap(), Duration::from_millis(ms), "case {s}");
        }
        for bad in ["", "10", "s", "10x", "1h-2m"] {
            assert!(parse_duration(bad).is_err(), "case {bad:?} should fail");
        }
        for ms in [1u64, 999, 1000, 61_000, 7_200_000, 5_400_250] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "round trip {ms}ms");
        }
    }
}
