//! Values as Prometheus' HTTP API writes them, for the parts that are the engine's vocabulary: floats in
//! vectors and matrices, and native histograms.
//!
//! Where the querier writes a vector element it writes `"histogram":[<t>,<object>]` instead of
//! `"value":[<t>,"<v>"]` when [`crate::InstantSample::h`] is set; a matrix series gets
//! `"histograms":[[<t>,<object>],...]` after `"values"` when [`crate::RangeSeries::histograms`] is not empty
//! (and `"values"` only when `samples` is not empty), as Prometheus' `Series` marshaler does. The object is
//! written by [`write_histogram_json`].

use heddle_model::FloatHistogram;

/// A float as Prometheus' API writes sample values (`jsonutil.MarshalFloat`): Go's shortest decimal, in
/// exponent form below 1e-6 and from 1e21 on (`"1e-07"`, `"1e+21"`), `NaN`, `+Inf`, `-Inf`.
pub fn api_float(v: f64) -> String {
    let abs = v.abs();
    if !v.is_finite() || v == 0.0 || (1e-6..1e21).contains(&abs) {
        return crate::go_format_float(v);
    }
    // Rust writes the same shortest digits as `1e21` / `1.5e-7`; Go signs the exponent and pads it to two.
    let text = format!("{v:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exponent),
    };
    format!("{mantissa}e{sign}{digits:0>2}")
}

/// Appends a native histogram as Prometheus' API writes it (`jsonutil.MarshalHistogram`):
/// `{"count":"<c>","sum":"<s>","buckets":[[<rule>,"<lower>","<upper>","<count>"],...]}`, the buckets lowest
/// first, empty ones left out, and `"buckets"` left out when none is populated. The rule says which bounds are
/// inclusive: 0 the upper (positive buckets), 1 the lower (negative buckets), 2 neither, 3 both (the zero
/// bucket).
pub fn write_histogram_json(out: &mut String, h: &FloatHistogram) {
    out.push_str(r#"{"count":""#);
    out.push_str(&api_float(h.count));
    out.push_str(r#"","sum":""#);
    out.push_str(&api_float(h.sum));
    out.push('"');
    let mut first = true;
    for b in h.all_buckets() {
        if b.count == 0.0 {
            continue;
        }
        out.push_str(if first { r#","buckets":["# } else { "," });
        first = false;
        let rule = match (b.lower_inclusive, b.upper_inclusive) {
            (false, true) => 0,
            (true, false) => 1,
            (false, false) => 2,
            (true, true) => 3,
        };
        out.push_str(&format!(
            r#"[{rule},"{}","{}","{}"]"#,
            api_float(b.lower),
            api_float(b.upper),
            api_float(b.count)
        ));
    }
    if !first {
        out.push(']');
    }
    out.push('}');
}
