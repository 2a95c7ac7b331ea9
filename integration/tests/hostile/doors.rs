//! Cross-origin requests to the admin routes: what a page on another site can make a browser send, with the
//! Basic credentials it cached for the ring page or without any. None may change state (403
//! `err-heddle-admin-cross-origin`, before the token is looked at, so no login prompt either); the same routes
//! still answer the process's own page and clients that are not browsers.

use super::case::*;

const CROSS_ORIGIN: &str = "err-heddle-admin-cross-origin";
const EVIL: &str = "https://evil.example";

/// The Basic credentials a browser caches after the ring page's login prompt: any user, the token as password.
fn cached_basic() -> String {
    format!("Basic {}", base64(format!("admin:{TOKEN}").as_bytes()))
}

fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A form another site's page submits: `text/plain` or urlencoded, with the headers a browser adds.
fn cross_site_form(name: &'static str, path: &str, content_type: &str, body: &str) -> Case {
    Case::post(name, path, body.as_bytes().to_vec())
        .admin()
        .header("Content-Type", content_type)
        .header("Origin", EVIL)
        .header("Sec-Fetch-Site", "cross-site")
        .header("Sec-Fetch-Mode", "navigate")
}

pub(crate) fn cases(_now: i64) -> Vec<Case> {
    vec![
        cross_site_form(
            "cross-site text/plain form to shutdown with cached Basic credentials",
            "/ingester/shutdown",
            "text/plain",
            "x=1",
        )
        .header("Authorization", &cached_basic())
        .want(
            403,
            &[
                CROSS_ORIGIN,
                "/ingester/shutdown",
                "Sec-Fetch-Site: cross-site",
                "with or without credentials",
            ],
        ),
        cross_site_form(
            "cross-site form to prepare-shutdown without credentials",
            "/ingester/prepare-shutdown",
            "application/x-www-form-urlencoded",
            "",
        )
        .want(403, &[CROSS_ORIGIN, "/ingester/prepare-shutdown"]),
        // A browser without Sec-Fetch-Site (before 2023) gives itself away by its Origin alone.
        Case::post(
            "old browser's form to flush from another origin",
            "/ingester/flush",
            b"a=b".to_vec(),
        )
        .admin()
        .header("Content-Type", "text/plain")
        .header("Origin", EVIL)
        .header("Authorization", &cached_basic())
        .want(403, &[CROSS_ORIGIN, "Origin: https://evil.example is not this host"]),
        // A sibling subdomain is the same site but not the same origin.
        Case::post(
            "same-site Forget form on the ring page",
            "/ingester/ring",
            b"forget=ingester-1".to_vec(),
        )
        .admin()
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Origin", "https://wiki.heddle.example")
        .header("Sec-Fetch-Site", "same-site")
        .token(TOKEN)
        .want(403, &[CROSS_ORIGIN, "/ingester/ring", "Sec-Fetch-Site: same-site"]),
        // An <img src=".../ingester/flush"> on another site: Mimir's flush answers GET, so GET is checked too.
        Case::get("cross-site image request to flush", "/ingester/flush")
            .admin()
            .header("Sec-Fetch-Site", "cross-site")
            .header("Sec-Fetch-Mode", "no-cors")
            .header("Authorization", &cached_basic())
            .want(403, &[CROSS_ORIGIN, "GET /ingester/flush"]),
        // A sandboxed iframe or a local file posts with an opaque origin.
        Case::post(
            "form from an opaque origin to prepare-shutdown",
            "/ingester/prepare-shutdown",
            Vec::new(),
        )
        .admin()
        .header("Origin", "null")
        .token(TOKEN)
        .want(403, &[CROSS_ORIGIN, "Origin: null"]),
        // None of the refused requests changed anything.
        Case::get("prepare-shutdown is still unset", "/ingester/prepare-shutdown")
            .admin()
            .token(TOKEN)
            .want(200, &["unset"]),
        // The process's own page (same origin) and a typed or bookmarked URL still work.
        Case::post(
            "same-origin flush from the process's own page",
            "/ingester/flush",
            Vec::new(),
        )
        .admin()
        .header("Sec-Fetch-Site", "same-origin")
        .header("Authorization", &cached_basic())
        .want(204, &[]),
        Case::get("the ring page opened from a link elsewhere", "/ingester/ring")
            .admin()
            .header("Sec-Fetch-Site", "cross-site")
            .token(TOKEN)
            .want(200, &["Ingester ring"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (raw, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), want, "{raw:?}");
        }
    }
}
