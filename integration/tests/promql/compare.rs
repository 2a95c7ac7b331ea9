//! Comparison of two Prometheus API answers: the same result type, the same series by exact label set, the same
//! timestamps, values equal within 1e-9 relative (1e-12 absolute near zero) with NaN equal to NaN and
//! infinities exact, and the same text for the same float (Prometheus writes `1e+21`, not `1000...0`); errors
//! must match errors of the same `errorType`.

use crate::api::{Answer, excerpt};
use serde_json::Value;
use std::collections::BTreeMap;

/// How many differing series a report names.
const SHOWN: usize = 3;

type LabelSet = BTreeMap<String, String>;
/// `(timestamp in ms, value, the value as written)`.
type Point = (i64, f64, String);

/// `None` when `got` agrees with `want`, else what differs. With `ordered`, a vector's series must also come in
/// the same order (compared by value, so that ties may come in any order).
pub fn compare(want: &Answer, got: &Answer, ordered: bool) -> Option<String> {
    match (want, got) {
        (Answer::Error { error_type: w, .. }, Answer::Error { error_type: g, .. }) if w == g => None,
        (Answer::Data(w), Answer::Data(g)) => compare_data(w, g, ordered).err(),
        _ => Some(format!("want {}\n      got  {}", want.describe(), got.describe())),
    }
}

fn compare_data(want: &Value, got: &Value, ordered: bool) -> Result<(), String> {
    let kind = want["resultType"].as_str().unwrap_or_default();
    if got["resultType"] != want["resultType"] {
        return Err(format!("resultType: want {kind}, got {}", got["resultType"]));
    }
    let (w, g) = (&want["result"], &got["result"]);
    match kind {
        "scalar" => compare_points(&[point(w)?], &[point(g)?]),
        "string" => compare_string(w, g),
        "vector" => {
            let want = vector(w)?;
            let got = vector(g)?;
            compare_series(&to_map(&want)?, &to_map(&got)?)?;
            if ordered { compare_order(&want, &got) } else { Ok(()) }
        }
        "matrix" => compare_series(&to_map(&matrix(w)?)?, &to_map(&matrix(g)?)?),
        other => Err(format!("unknown resultType {other:?}")),
    }
}

/// `[<seconds>, "<string>"]`: the same time and text.
fn compare_string(want: &Value, got: &Value) -> Result<(), String> {
    let parse = |v: &Value| Some(((v[0].as_f64()? * 1000.0).round() as i64, v[1].as_str()?.to_owned()));
    match (parse(want), parse(got)) {
        (Some(w), Some(g)) if w == g => Ok(()),
        _ => Err(format!("string: want {want}, got {got}")),
    }
}

/// `[<seconds>, "<value>"]`.
fn point(v: &Value) -> Result<Point, String> {
    let t = v[0].as_f64().ok_or_else(|| format!("bad timestamp in {v}"))?;
    let s = v[1].as_str().ok_or_else(|| format!("bad value in {v}"))?;
    let value = match s {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => s.parse().map_err(|e| format!("value {s:?}: {e}"))?,
    };
    Ok(((t * 1000.0).round() as i64, value, s.to_owned()))
}

fn labels(v: &Value) -> Result<LabelSet, String> {
    let obj = v["metric"].as_object().ok_or_else(|| format!("no metric in {v}"))?;
    obj.iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                v.as_str().ok_or_else(|| format!("label {k}={v}"))?.to_owned(),
            ))
        })
        .collect()
}

fn vector(v: &Value) -> Result<Vec<(LabelSet, Vec<Point>)>, String> {
    let items = v.as_array().ok_or_else(|| format!("vector is not an array: {v}"))?;
    items
        .iter()
        .map(|s| Ok((labels(s)?, vec![point(&s["value"])?])))
        .collect()
}

fn matrix(v: &Value) -> Result<Vec<(LabelSet, Vec<Point>)>, String> {
    let items = v.as_array().ok_or_else(|| format!("matrix is not an array: {v}"))?;
    items
        .iter()
        .map(|s| {
            let values = s["values"].as_array().ok_or_else(|| format!("no values in {s}"))?;
            Ok((labels(s)?, values.iter().map(point).collect::<Result<_, _>>()?))
        })
        .collect()
}

fn to_map(series: &[(LabelSet, Vec<Point>)]) -> Result<BTreeMap<LabelSet, Vec<Point>>, String> {
    let mut map = BTreeMap::new();
    for (labels, points) in series {
        if map.insert(labels.clone(), points.clone()).is_some() {
            return Err(format!("the label set {} appears twice", show(labels)));
        }
    }
    Ok(map)
}

pub fn show(labels: &LabelSet) -> String {
    let name = labels.get("__name__").map_or("", String::as_str);
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{name}{{{}}}", rest.join(", "))
}

fn compare_series(want: &BTreeMap<LabelSet, Vec<Point>>, got: &BTreeMap<LabelSet, Vec<Point>>) -> Result<(), String> {
    let missing: Vec<&LabelSet> = want.keys().filter(|l| !got.contains_key(*l)).collect();
    let extra: Vec<&LabelSet> = got.keys().filter(|l| !want.contains_key(*l)).collect();
    let differing: Vec<String> = want
        .iter()
        .filter_map(|(l, w)| Some(format!("{}: {}", show(l), compare_points(w, got.get(l)?).err()?)))
        .collect();
    if missing.is_empty() && extra.is_empty() && differing.is_empty() {
        return Ok(());
    }
    let mut out = format!("{} series wanted, {} got", want.len(), got.len());
    let list = |title: &str, items: Vec<String>, out: &mut String| {
        if !items.is_empty() {
            out.push_str(&format!("\n        {title} ({}):", items.len()));
            for i in items.iter().take(SHOWN) {
                out.push_str(&format!("\n          {}", excerpt(i, 300)));
            }
        }
    };
    list("missing", missing.into_iter().map(show).collect(), &mut out);
    list("unexpected", extra.into_iter().map(show).collect(), &mut out);
    list("different values", differing, &mut out);
    Err(out)
}

fn compare_points(want: &[Point], got: &[Point]) -> Result<(), String> {
    let wt: Vec<i64> = want.iter().map(|p| p.0).collect();
    let gt: Vec<i64> = got.iter().map(|p| p.0).collect();
    if wt != gt {
        let first = wt
            .iter()
            .zip(&gt)
            .position(|(a, b)| a != b)
            .unwrap_or(wt.len().min(gt.len()));
        return Err(format!(
            "{} points wanted, {} got; timestamps differ from index {first}: want {:?}, got {:?}",
            wt.len(),
            gt.len(),
            wt.get(first),
            gt.get(first)
        ));
    }
    if let Some((w, g)) = want.iter().zip(got).find(|(w, g)| !same_value(w.1, g.1)) {
        return Err(format!("at t={}: want {}, got {}", w.0, w.1, g.1));
    }
    match want
        .iter()
        .zip(got)
        .find(|(w, g)| w.1.to_bits() == g.1.to_bits() && w.2 != g.2)
    {
        None => Ok(()),
        Some((w, g)) => Err(format!(
            "at t={}: the same value written {:?}, want {:?}",
            w.0, g.2, w.2
        )),
    }
}

/// Equal within 1e-9 relative or 1e-12 absolute; NaN equals NaN; infinities exact.
pub fn same_value(want: f64, got: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    let diff = (want - got).abs();
    diff <= 1e-12 || diff <= 1e-9 * want.abs().max(got.abs())
}

/// The series already agree as sets; here their order must give the same sequence of values.
fn compare_order(want: &[(LabelSet, Vec<Point>)], got: &[(LabelSet, Vec<Point>)]) -> Result<(), String> {
    let position = want
        .iter()
        .zip(got)
        .position(|((_, w), (_, g))| !same_value(w[0].1, g[0].1));
    match position {
        None => Ok(()),
        Some(i) => Err(format!(
            "order differs at position {i}: want {} = {}, got {} = {}",
            show(&want[i].0),
            want[i].1[0].1,
            show(&got[i].0),
            got[i].1[0].1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vector(series: &[(&str, &str)]) -> Answer {
        let result: Vec<Value> = series
            .iter()
            .map(|(name, v)| json!({"metric": {"__name__": name}, "value": [1.5, v]}))
            .collect();
        Answer::Data(json!({"resultType": "vector", "result": result}))
    }

    fn error(status: u16, error_type: &str) -> Answer {
        Answer::Error {
            status,
            error_type: error_type.to_owned(),
            message: "m".to_owned(),
        }
    }

    #[test]
    fn values_within_tolerance_agree() {
        for (name, want, got, same) in [
            ("equal", 1.0, 1.0, true),
            ("relative 1e-10", 1e6, 1e6 * (1.0 + 1e-10), true),
            ("relative 1e-8", 1e6, 1e6 * (1.0 + 1e-8), false),
            ("absolute near zero", 0.0, 1e-13, true),
            ("nan", f64::NAN, f64::NAN, true),
            ("nan and number", f64::NAN, 0.0, false),
            ("infinities", f64::INFINITY, f64::INFINITY, true),
            ("opposite infinities", f64::INFINITY, f64::NEG_INFINITY, false),
        ] {
            assert_eq!(same_value(want, got), same, "{name}");
        }
    }

    #[test]
    fn differences_are_found() {
        let base = vector(&[("a", "1"), ("b", "+Inf")]);
        for (name, got, ordered, differs) in [
            ("same", vector(&[("a", "1"), ("b", "+Inf")]), true, false),
            (
                "reordered, unordered",
                vector(&[("b", "+Inf"), ("a", "1")]),
                false,
                false,
            ),
            ("reordered, ordered", vector(&[("b", "+Inf"), ("a", "1")]), true, true),
            ("missing series", vector(&[("a", "1")]), false, true),
            (
                "extra series",
                vector(&[("a", "1"), ("b", "+Inf"), ("c", "0")]),
                false,
                true,
            ),
            ("other value", vector(&[("a", "1.1"), ("b", "+Inf")]), false, true),
            ("NaN for Inf", vector(&[("a", "1"), ("b", "NaN")]), false, true),
            (
                "same value, other text",
                vector(&[("a", "1.0"), ("b", "+Inf")]),
                false,
                true,
            ),
            ("error", error(422, "execution"), false, true),
        ] {
            assert_eq!(compare(&base, &got, ordered).is_some(), differs, "{name}");
        }
        let scalar = Answer::Data(json!({"resultType": "scalar", "result": [1.5, "1"]}));
        assert!(compare(&base, &scalar, false).is_some(), "result types differ");
        assert!(compare(&error(400, "bad_data"), &error(400, "bad_data"), false).is_none());
        assert!(compare(&error(400, "bad_data"), &error(422, "execution"), false).is_some());
        assert!(compare(&error(400, "bad_data"), &error(404, ""), false).is_some());
    }

    #[test]
    fn strings_compare_time_and_text() {
        let s = |t: Value, text: &str| Answer::Data(json!({"resultType": "string", "result": [t, text]}));
        assert!(compare(&s(json!(2), "a"), &s(json!(2.0), "a"), false).is_none());
        assert!(compare(&s(json!(2), "a"), &s(json!(2), "b"), false).is_some());
        assert!(compare(&s(json!(2), "a"), &s(json!(3), "a"), false).is_some());
    }

    #[test]
    fn timestamps_must_match_exactly() {
        let m =
            |t: f64| Answer::Data(json!({"resultType": "matrix", "result": [{"metric": {}, "values": [[t, "1"]]}]}));
        assert!(compare(&m(1.5), &m(1.5), false).is_none());
        assert!(compare(&m(1.5), &m(1.501), false).is_some());
    }
}
