//! The browser UI: the static files of `web/`, compiled into the binary so `docqa serve` needs nothing
//! beside it and works offline. `/` is the page; its scripts and styles live under `/ui/`, the vendored
//! pdf.js (`web/vendor/pdfjs/`, its ES module and worker) under `/ui/vendor/pdfjs/`.

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
    ("pdf_page.js", JS),
    ("thread.js", JS),
    ("vendor/pdfjs/pdf.min.mjs", JS),
    ("vendor/pdfjs/pdf.worker.min.mjs", JS),
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
        .route("/ui/{name:.+}", web::get().to(asset));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files under `dir` (recursively), as paths relative to `web/` with `/` separators.
    fn files_under(dir: &std::path::Path, prefix: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("folder is readable") {
            let entry = entry.expect("entry");
            let name = entry.file_name().into_string().expect("utf-8");
            let path = format!("{prefix}{name}");
            if entry.file_type().expect("file type").is_dir() {
                files_under(&entry.path(), &format!("{path}/"), out);
            } else {
                out.push(path);
            }
        }
    }

    #[test]
    fn every_file_of_the_web_folder_is_served() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../web");
        let mut files = Vec::new();
        files_under(std::path::Path::new(dir), "", &mut files);
        for name in files {
            let served = [".js", ".mjs", ".css", ".html"]
                .iter()
                .any(|ext| name.ends_with(ext));
            if served {
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "web/{name} is not in the served list"
                );
            }
        }
    }

    #[test]
    fn scripts_are_served_as_javascript() {
        for asset in ASSETS {
            if asset.name.ends_with(".js") || asset.name.ends_with(".mjs") {
                assert_eq!(asset.content_type, JS, "{}", asset.name);
            }
        }
    }

    /// The `./…` modules a file imports, statically (`from "./x.js"`) or when needed (`import("./x.js")`),
    /// as paths relative to `web/`.
    fn imported_modules(asset: &Asset) -> Vec<String> {
        let folder = asset.name.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut targets = Vec::new();
        for line in asset.body.lines() {
            for marker in [" from \"./", "import(\"./"] {
                for from in line.split(marker).skip(1) {
                    let target = from.split('"').next().unwrap_or_default();
                    targets.push(if folder.is_empty() {
                        target.to_owned()
                    } else {
                        format!("{folder}/{target}")
                    });
                }
            }
        }
        targets
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        for asset in ASSETS {
            for target in imported_modules(asset) {
                assert!(
                    ASSETS.iter().any(|a| a.name == target),
                    "{} imports {target}, which is not served",
                    asset.name
                );
            }
        }
    }

    #[test]
    fn a_vendored_module_is_served_from_its_folder() {
        let worker = ASSETS
            .iter()
            .find(|a| a.name == "vendor/pdfjs/pdf.worker.min.mjs")
            .expect("the pdf.js worker is listed");
        let response = respond(worker);
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .expect("a content type");
        assert_eq!(content_type, JS);
    }
}
