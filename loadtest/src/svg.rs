//! Minimal inline-SVG charts for the HTML reports: line charts over time and horizontal bar charts.

use std::fmt::Write as _;

const W: f64 = 640.0;
const H: f64 = 240.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;

/// Colours of successive lines.
pub const PALETTE: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Escapes text for HTML and SVG.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound for an axis (1, 2 or 5 times a power of ten).
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// Formats an axis value compactly (1.5k, 2M).
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.3}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.3}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
    .replace(".000", "")
}

/// A line chart with a title, x label and y unit; the y axis starts at 0.
pub fn line_chart(title: &str, x_label: &str, y_unit: &str, lines: &[Line]) -> String {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let x_max = xs.fold(0.0f64, f64::max).max(1e-9);
    let y_max = nice_max(
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |x: f64| LEFT + x / x_max * pw;
    let sy = |y: f64| TOP + ph - y / y_max * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="18" font-size="13" font-weight="bold">{} ({})</text>"#,
        LEFT,
        escape(title),
        escape(y_unit)
    );
    for k in 0..=4 {
        let y = y_max * f64::from(k) / 4.0;
        let py = sy(y);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            escape(&short(y))
        );
    }
    let step = nice_max(x_max / 5.0);
    let mut x = 0.0;
    while x <= x_max * 1.0001 {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            sx(x),
            H - BOTTOM + 16.0,
            escape(&short(x))
        );
        x += step;
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 6.0,
        escape(x_label)
    );
    for (k, line) in lines.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let pts: Vec<String> = line
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
            pts.join(" ")
        );
        let lx = LEFT + 260.0 + 80.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            10.0,
            lx + 14.0,
            16.0,
            escape(&line.name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Horizontal bars, one per `(label, value)`, scaled to the largest.
pub fn bar_chart(title: &str, unit: &str, bars: &[(String, f64)]) -> String {
    let row = 22.0;
    let h = TOP + row * bars.len() as f64 + 10.0;
    let max = nice_max(bars.iter().map(|b| b.1).fold(0.0, f64::max));
    let left = 180.0;
    let pw = W - left - 90.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="11"><text x="10" y="18" font-size="13" font-weight="bold">{} ({})</text>"#,
        escape(title),
        escape(unit)
    );
    for (k, (label, v)) in bars.iter().enumerate() {
        let y = TOP + row * k as f64;
        let w = (v / max * pw).max(0.0);
        let color = PALETTE[k % PALETTE.len()];
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect class="series" x="{left}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            left - 6.0,
            y + 14.0,
            escape(label),
            row - 6.0,
            left + w + 4.0,
            y + 14.0,
            escape(&short(*v))
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_helpers() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(5000.0), 5000.0);
        assert_eq!(short(250_000.0), "250k");
        assert_eq!(short(1_500_000.0), "1.500M");
        assert_eq!(short(0.5), "0.50");
    }

    #[test]
    fn charts_hold_one_element_per_series_and_escape_text() {
        let lines = vec![
            Line {
                name: "p50".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
            },
            Line {
                name: "p<99>".into(),
                points: vec![(0.0, 3.0), (1.0, f64::NAN)],
            },
        ];
        let svg = line_chart("latency & more", "s", "ms", &lines);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"series\"").count(), 2);
        assert!(svg.contains("latency &amp; more") && svg.contains("p&lt;99&gt;"));
        let bars = bar_chart("cpu", "s", &[("a".into(), 1.0), ("b".into(), 2.0)]);
        assert_eq!(bars.matches("class=\"series\"").count(), 2);
    }
}
