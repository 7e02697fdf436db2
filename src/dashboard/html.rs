//! HTML as the dashboard writes it: every value from a job or a user escaped on the way
//! in, one layout around every page, and the headers that keep a page to its own origin
//! (no inline script, no framing, nothing cached).

use std::fmt::Write as _;

use actix_web::http::header;
use actix_web::HttpResponse;
use chrono::{DateTime, Utc};

use super::session::Viewer;

/// Scripts, styles and connections from this origin only; no inline script; no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `text` safe inside an element or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // A NUL is shown, not passed to the browser.
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A query string's value, percent-encoded.
pub fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// A time as people read it here: UTC, to the second.
pub fn time(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

pub fn maybe_time(at: Option<&DateTime<Utc>>) -> String {
    at.map_or_else(|| "–".to_owned(), time)
}

/// A duration in the largest unit that reads well.
pub fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// A status as a badge.
pub fn status(status: &str) -> String {
    format!(r#"<span class="status {0}">{0}</span>"#, esc(status))
}

/// A progress bar: `current` of `total`, or the count alone.
pub fn progress(current: i64, total: Option<i64>) -> String {
    match total {
        Some(total) if total > 0 => {
            let percent = (current.clamp(0, total) * 100) / total;
            format!(
                r#"<progress max="{total}" value="{current}"></progress> <span class="count">{current}/{total} ({percent}%)</span>"#
            )
        }
        _ if current > 0 => format!(r#"<span class="count">{current}</span>"#),
        _ => String::new(),
    }
}

/// A form that posts to `action` with the session's CSRF token, as one button.
pub fn button(viewer: &Viewer, action: &str, label: &str, class: &str, confirm: Option<&str>) -> String {
    let confirm = confirm.map(|text| format!(r#" data-confirm="{}""#, esc(text))).unwrap_or_default();
    format!(
        r#"<form method="post" action="{}" class="inline"{confirm}><input type="hidden" name="csrf" value="{}"><button type="submit" class="{}">{}</button></form>"#,
        esc(action),
        esc(viewer.csrf()),
        esc(class),
        esc(label)
    )
}

/// A whole page: the navigation for `viewer`, then `body`.
pub fn page(viewer: Option<&Viewer>, title: &str, body: &str) -> HttpResponse {
    page_with(viewer, title, body, "")
}

/// As [`page`], with extra elements for the head (a refresh, say).
pub fn page_with(viewer: Option<&Viewer>, title: &str, body: &str, head: &str) -> HttpResponse {
    let mut html = String::with_capacity(body.len() + 2048);
    let _ = write!(
        html,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{} · yardmaster</title><link rel="stylesheet" href="/ui/assets/dashboard.css"><script src="/ui/assets/dashboard.js" defer></script>{head}</head><body>"#,
        esc(title)
    );
    if let Some(viewer) = viewer {
        let identity = viewer.caller().identity();
        let _ = write!(
            html,
            r#"<header><nav><a class="brand" href="/ui">yardmaster</a><a href="/ui">Queues</a><a href="/ui/jobs">Jobs</a>"#
        );
        if viewer.caller().is_admin() {
            html.push_str(r#"<a href="/ui/dead-letters">Dead letters</a>"#);
        }
        let _ = write!(
            html,
            r#"</nav><div class="who"><span class="user">{}</span> <span class="role">{}{}</span> {}</div></header>"#,
            esc(&identity.user),
            identity.role.as_str(),
            if identity.read_only { " · read-only" } else { "" },
            button(viewer, "/ui/logout", "Log out", "link", None),
        );
    }
    let _ = write!(html, "<main>{body}</main></body></html>");
    HttpResponse::Ok()
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .content_type("text/html; charset=utf-8")
        .body(html)
}

/// A page that says what went wrong, with `status`.
pub fn problem(
    viewer: Option<&Viewer>,
    status: actix_web::http::StatusCode,
    title: &str,
    detail: &str,
) -> HttpResponse {
    let body = format!(
        r#"<h1>{}</h1><p class="notice error">{}</p><p><a href="/ui">Back to the queues</a></p>"#,
        esc(title),
        esc(detail)
    );
    let mut response = page(viewer, title, &body);
    *response.status_mut() = status;
    response
}

/// A 303 to `location` (after a form, or to the login page).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, location.to_owned())).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_query_characters_are_escaped() {
        assert_eq!(esc(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(esc("a\0b"), "a\u{fffd}b");
        assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
