//! Small helpers for the server-rendered status pages (the ring page, the HA tracker page).

/// `s` with the characters that are special in HTML text and attribute values escaped.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An age for people: `850ms ago`, `12.3s ago`, `4m 05s ago`; negative ages (clock skew) read as `now`.
pub fn format_age_ms(ms: i64) -> String {
    match ms {
        ..=0 => "now".to_owned(),
        1..1000 => format!("{ms}ms ago"),
        1000..60_000 => format!("{:.1}s ago", ms as f64 / 1000.0),
        _ => format!("{}m {:02}s ago", ms / 60_000, (ms % 60_000) / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            html_escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(html_escape("plain ü"), "plain ü");
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(format_age_ms(-5), "now");
        assert_eq!(format_age_ms(850), "850ms ago");
        assert_eq!(format_age_ms(12_340), "12.3s ago");
        assert_eq!(format_age_ms(245_000), "4m 05s ago");
    }
}
