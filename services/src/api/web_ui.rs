//! The browser UI: the static files of `web/`, compiled into the binary so `docqa serve` needs nothing
//! beside it and works offline. `/` is the page; its scripts and styles live under `/ui/`.

use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use actix_web::{HttpResponse, web};

use super::error::{ApiError, ApiResult};

/// A served file: name under `/ui/`, content type, bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! assets {
    ($(($name:literal, $type:expr)),* $(,)?) => {
        &[$(Asset {
            name: $name,
            content_type: $type,
            body: include_str!(concat!("../../../web/", $name)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = assets![
    ("index.html", "text/html; charset=utf-8"),
    ("app.css", "text/css; charset=utf-8"),
    ("api.js", JS),
    ("ask.js", JS),
    ("documents.js", JS),
    ("format.js", JS),
    ("history.js", JS),
    ("main.js", JS),
    ("state.js", JS),
    ("upload.js", JS),
    ("viewer.js", JS),
];

fn respond(asset: &Asset) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, asset.content_type))
        // Served from the binary: revalidate so a new release is picked up at once.
        .insert_header((CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(asset.body)
}

async fn page() -> HttpResponse {
    respond(&ASSETS[0])
}

async fn asset(name: web::Path<String>) -> ApiResult<HttpResponse> {
    ASSETS
        .iter()
        .find(|a| a.name == name.as_str())
        .map(respond)
        .ok_or_else(|| ApiError::not_found("file", &format!("/ui/{name}")))
}

/// Routes of this file.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(page))
        .route("/ui/{name}", web::get().to(asset));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_web_folder_is_served() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../web");
        for entry in std::fs::read_dir(dir).expect("web/ exists") {
            let name = entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8");
            let served = name.ends_with(".js") || name.ends_with(".css") || name.ends_with(".html");
            if served {
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "web/{name} is not in the served list"
                );
            }
        }
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        for asset in ASSETS {
            for line in asset.body.lines() {
                let Some(from) = line.split(" from \"./").nth(1) else {
                    continue;
                };
                let target = from.split('"').next().unwrap_or_default();
                assert!(
                    ASSETS.iter().any(|a| a.name == target),
                    "{} imports {target}, which is not served",
                    asset.name
                );
            }
        }
    }
}
