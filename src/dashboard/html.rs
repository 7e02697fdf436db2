//! HTML as the dashboard writes it, with maud: every value spliced into a page is escaped
//! by construction (only `PreEscaped`, which nothing here gives a user's text, is not), one
//! layout around every page, and the headers that keep a page to its own origin (no inline
//! script, no framing, nothing cached).

use std::fmt::Write as _;

use actix_web::http::header;
use actix_web::HttpResponse;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::session::Viewer;

/// Scripts, styles and connections from this origin only; no inline script; no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Text as it is shown: a NUL is shown as U+FFFD, not passed to the browser (maud escapes
/// the rest).
pub fn shown(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
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
pub fn status(status: &str) -> Markup {
    html! { span class={ "status " (status) } { (status) } }
}

/// A progress bar: `current` of `total`, or the count alone.
pub fn progress(current: i64, total: Option<i64>) -> Markup {
    match total {
        Some(total) if total > 0 => {
            let percent = (current.clamp(0, total) * 100) / total;
            html! {
                progress max=(total) value=(current) {}
                " "
                span class="count" { (current) "/" (total) " (" (percent) "%)" }
            }
        }
        _ if current > 0 => html! { span class="count" { (current) } },
        _ => html! {},
    }
}

/// A form that posts to `action` with the session's CSRF token, as one button.
pub fn button(viewer: &Viewer, action: &str, label: &str, class: &str, confirm: Option<&str>) -> Markup {
    html! {
        form method="post" action=(action) class="inline" data-confirm=[confirm] {
            input type="hidden" name="csrf" value=(viewer.csrf());
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A whole page: the navigation for `viewer`, then `body`.
pub fn page(viewer: Option<&Viewer>, title: &str, body: Markup) -> HttpResponse {
    page_with(viewer, title, body, html! {})
}

/// As [`page`], with extra elements for the head (a refresh, say).
pub fn page_with(viewer: Option<&Viewer>, title: &str, body: Markup, head: Markup) -> HttpResponse {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (shown(title)) " · yardmaster" }
                link rel="stylesheet" href="/ui/assets/dashboard.css";
                script src="/ui/assets/dashboard.js" defer {}
                (head)
            }
            body {
                @if let Some(viewer) = viewer {
                    @let identity = viewer.caller().identity();
                    header {
                        nav {
                            a class="brand" href="/ui" { "yardmaster" }
                            a href="/ui" { "Queues" }
                            a href="/ui/jobs" { "Jobs" }
                            a href="/ui/schedules" { "Schedules" }
                            @if viewer.caller().is_admin() {
                                a href="/ui/dead-letters" { "Dead letters" }
                            }
                        }
                        div class="who" {
                            span class="user" { (shown(&identity.user)) }
                            " "
                            span class="role" {
                                (identity.role.as_str())
                                @if identity.read_only { " · read-only" }
                            }
                            " "
                            (button(viewer, "/ui/logout", "Log out", "link", None))
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .content_type("text/html; charset=utf-8")
        .body(html.into_string())
}

/// A page that says what went wrong, with `status`.
pub fn problem(
    viewer: Option<&Viewer>,
    status: actix_web::http::StatusCode,
    title: &str,
    detail: &str,
) -> HttpResponse {
    let body = html! {
        h1 { (shown(title)) }
        p class="notice error" { (shown(detail)) }
        p { a href="/ui" { "Back to the queues" } }
    };
    let mut response = page(viewer, title, body);
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
        let text = r#"<a href="x">'&'</a>"#;
        let markup = html! { p title=(text) { (text) } }.into_string();
        assert_eq!(
            markup,
            r#"<p title="&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;">&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;</p>"#
        );
        assert_eq!(shown("a\0b"), "a\u{fffd}b");
        assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
