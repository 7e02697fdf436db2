//! `GET /ui/login` asks for a token; `POST /ui/login` checks it and sets the session cookie;
//! `POST /ui/logout` removes it.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use maud::{html, Markup};

use super::html;
use super::session::{self, Admission, Viewer};
use crate::auth::Authenticator;

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    pub csrf: String,
}

fn form(next: &str, error: Option<&str>) -> Markup {
    html! {
        section class="login" {
            h1 { "yardmaster" }
            @if let Some(error) = error { p class="notice error" role="alert" { (error) } }
            form method="post" action="/ui/login" {
                label for="token" { "API token" }
                input id="token" name="token" type="password" autocomplete="current-password" required autofocus placeholder="ym_…";
                input type="hidden" name="next" value=(next);
                button type="submit" { "Log in" }
            }
            p class="hint" {
                "An admin or member token (" code { "yardmaster token create" } "). A read-only token sees everything its rooms hold and changes nothing."
            }
        }
    }
}

pub async fn page(query: web::Query<LoginQuery>) -> HttpResponse {
    let next = session::safe_next(query.next.as_deref().unwrap_or("/ui"));
    html::page(None, "Log in", form(next, None))
}

pub async fn submit(auth: web::Data<Authenticator>, req: HttpRequest, body: web::Form<LoginForm>) -> HttpResponse {
    if !session::same_origin(&req) {
        return html::problem(None, StatusCode::FORBIDDEN, "Refused", "a login must come from this site's own page");
    }
    let next = session::safe_next(body.next.as_deref().unwrap_or("/ui")).to_owned();
    let token = body.token.trim();
    let refused = |status: StatusCode, why: &str| {
        let mut response = html::page(None, "Log in", form(&next, Some(why)));
        *response.status_mut() = status;
        response
    };
    match session::admit(&auth, token).await {
        Admission::Admitted(viewer) => {
            let identity = viewer.caller().identity();
            tracing::info!(user = %identity.user, role = identity.role.as_str(), "dashboard login");
            let mut response = html::see_other(&next);
            let _ = response.add_cookie(&session::cookie(&req, token));
            response
        }
        Admission::WrongRole => {
            refused(StatusCode::FORBIDDEN, "a worker token cannot log in here: use an admin or member token")
        }
        Admission::Refused => refused(StatusCode::UNAUTHORIZED, "that token is unknown or revoked"),
        Admission::Unavailable => {
            refused(StatusCode::SERVICE_UNAVAILABLE, "the token could not be checked: try again in a moment")
        }
    }
}

pub async fn logout(viewer: Viewer, body: web::Form<CsrfForm>) -> HttpResponse {
    if let Err(refused) = viewer.check_csrf(&body.csrf) {
        return refused;
    }
    let mut response = html::see_other("/ui/login");
    let _ = response.add_removal_cookie(&session::removal());
    response
}
