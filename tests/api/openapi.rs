//! The published contract: `/openapi.json` documents exactly the routes the router serves,
//! each with the security its guard enforces, and the docs page is served from the binary.
//! (schemathesis checks the server against the document: `tests/contract/run.sh`.)

use std::collections::BTreeSet;

use serde_json::Value;
use yardmaster::api::routes;
use yardmaster::auth::Access;

use crate::helpers::{read, Backend, TestApp, TestOptions};

/// Routes that serve the contract itself rather than the API it describes.
const DOCS: [&str; 3] = ["/openapi.json", "/docs", "/docs/{file:.*}"];

/// A route's path as OpenAPI spells it: a tail that spans segments (`{path:.*}`) is a
/// plain parameter there.
fn documented_path(route: &str) -> String {
    route.replace(":.*}", "}")
}

async fn the_document_describes_exactly_the_router(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let response = reqwest::Client::new().get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, spec) = read(response).await;
    assert_eq!(status, 200, "the contract is public");
    assert_eq!(spec["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = spec["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |method| (path.clone(), method.clone())))
        .filter(|(_, method)| ["get", "post", "put", "patch", "delete"].contains(&method.as_str()))
        .collect();
    let served: BTreeSet<(String, String)> = routes()
        .filter(|route| !DOCS.contains(&route.path))
        .flat_map(|route| {
            route.allow.split(", ").map(move |method| (documented_path(route.path), method.to_lowercase()))
        })
        .filter(|(_, method)| method != "head")
        .collect();
    assert_eq!(documented, served, "the document and the router disagree");
    for route in routes().filter(|route| !DOCS.contains(&route.path)) {
        for method in route.allow.split(", ").filter(|method| *method != "HEAD") {
            let operation = &spec["paths"][documented_path(route.path)][method.to_lowercase()];
            let secured = operation["security"] == serde_json::json!([{ "bearer": [] }]);
            assert_eq!(secured, route.access != Access::Public, "{method} {}: {operation}", route.path);
            assert_eq!(
                operation["responses"]["401"].is_object(),
                route.access != Access::Public,
                "{method} {}",
                route.path
            );
            let codes = operation["responses"].as_object().unwrap().keys().filter(|code| code.starts_with('2')).count();
            assert!(codes > 0, "{method} {} documents no success", route.path);
        }
    }
    let codes = &spec["components"]["schemas"]["Problem"]["properties"]["code"]["enum"];
    assert!(codes.as_array().unwrap().contains(&Value::from("room_forbidden")), "{codes}");
    let operation = &spec["components"]["schemas"]["SubmitRequest"]["properties"]["operation"]["anyOf"];
    let operations = &operation[0]["enum"];
    assert!(operations.as_array().unwrap().contains(&Value::from("count")), "this app's own operation: {operations}");
    assert!(
        operation[1]["pattern"].as_str().is_some_and(|pattern| pattern.contains(':')),
        "registered types: {operation}"
    );
}

async fn the_docs_page_is_served_from_the_binary(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(yardmaster::http::CLIENT_IDLE)
        .build()
        .unwrap();
    let response = plain.get(app.url("/docs")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), response.headers()["location"].to_str().unwrap()), (308, "/docs/"));
    let (status, page) = read(plain.get(app.url("/docs/")).send().await.unwrap()).await;
    let page = page.as_str().unwrap().to_owned();
    assert_eq!(status, 200);
    assert!(page.contains("swagger-ui"), "{page:.300}");
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "the page loads something from elsewhere");
    let (status, script) = read(plain.get(app.url("/docs/swagger-initializer.js")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(script.as_str().unwrap().contains("/openapi.json"), "{script}");
    let bundle = plain.get(app.url("/docs/swagger-ui-bundle.js")).send().await.unwrap();
    assert_eq!(bundle.status(), 200);
    assert!(bundle.bytes().await.unwrap().len() > 100_000, "the UI's code is served whole");
    for missing in ["/docs/nope.js", "/docs/..%2F..%2Fetc%2Fpasswd", "/docs/%00"] {
        let (status, problem) = read(plain.get(app.url(missing)).send().await.unwrap()).await;
        assert_eq!((status, problem["code"].as_str()), (404, Some("not_found")), "{missing}: {problem}");
    }
    let response = plain.post(app.url("/docs/index.html")).send().await.unwrap();
    assert_eq!(response.status(), 405);
}

on_both_backends!(the_document_describes_exactly_the_router, the_docs_page_is_served_from_the_binary);
