//! Reading a process's own metrics: its `/metrics` text exposition, and one series' value in it.

use crate::TestkitError;

/// The text exposition at `{url}/metrics`; a status other than 2xx is an error, so a test never parses an
/// error page as metrics.
pub async fn metrics_text(http: &reqwest::Client, url: &str) -> Result<String, TestkitError> {
    let url = format!("{url}/metrics");
    let fail = |detail: String| TestkitError::Http {
        url: url.clone(),
        detail,
    };
    let response = http.get(&url).send().await.map_err(|e| fail(format!("send: {e}")))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| fail(format!("body: {e}")))?;
    if !status.is_success() {
        return Err(TestkitError::Status {
            url,
            status: status.as_u16(),
            body,
        });
    }
    Ok(body)
}

/// The value of the series `series` in a text exposition, `None` when it is not there. `series` is the series
/// as exposed, labels included in their exposed order (`heddle_x_total{tenant="a",reason="b"}`): a bare name
/// matches only a family without labels, never one of its labelled series.
pub fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP heddle_up Whether it is up.
# TYPE heddle_up gauge
heddle_up 1
heddle_up_total 7
heddle_discarded_total{tenant=\"a\",reason=\"r\"} 2.5
heddle_nan NaN
";

    #[test]
    fn finds_one_series_value() {
        let cases: [(&str, &str, Option<f64>); 6] = [
            ("a family without labels", "heddle_up", Some(1.0)),
            ("a longer name sharing the prefix", "heddle_up_total", Some(7.0)),
            (
                "a labelled series",
                "heddle_discarded_total{tenant=\"a\",reason=\"r\"}",
                Some(2.5),
            ),
            ("a bare name of a labelled family", "heddle_discarded_total", None),
            ("an absent series", "heddle_down", None),
            ("a prefix of a name", "heddle_u", None),
        ];
        for (case, series, want) in cases {
            assert_eq!(metric_value(EXPOSITION, series), want, "{case}");
        }
        assert!(
            metric_value(EXPOSITION, "heddle_nan").is_some_and(f64::is_nan),
            "NaN parses"
        );
    }
}
