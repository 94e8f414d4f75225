//! `lexlip demo` as a newcomer runs it, on npm tarballs made here in the packages' layout
//! from the twelve committed Noto PNGs (so no network): it builds the emoji collection with
//! `models/emoji-lex-imagenet` (its default), says what it does, reuses its work on a second run,
//! refuses bad input before writing anything, and serves the page and the collection.

use std::path::Path;

use lexlip_tests::models::workspace;
use lexlip_tests::packages::tgz;
use lexlip_tests::server::Server;
use lexlip_tests::{collections, lexlip};
use serde_json::json;

/// (PNG file, hexcode as emojibase writes it, label, tags, group order)
const EMOJI: &[(&str, &str, &str, &[&str], u32)] = &[
    ("1f436.png", "1F436", "dog face", &["dog", "face", "pet"], 3),
    ("1f431.png", "1F431", "cat face", &["cat", "face", "pet"], 3),
    ("2764-fe0f.png", "2764-FE0F", "red heart", &["heart"], 0),
    ("1f525.png", "1F525", "fire", &["flame", "tool"], 6),
    (
        "2744-fe0f.png",
        "2744-FE0F",
        "snowflake",
        &["cold", "snow"],
        6,
    ),
    ("1f34c.png", "1F34C", "banana", &["fruit"], 4),
    ("26bd.png", "26BD", "soccer ball", &["ball", "football"], 6),
    ("2600-fe0f.png", "2600-FE0F", "sun", &["bright", "sunny"], 6),
    ("1f438.png", "1F438", "frog", &["face"], 3),
    ("1f345.png", "1F345", "tomato", &["fruit", "vegetable"], 4),
    ("1f697.png", "1F697", "automobile", &["car"], 5),
    (
        "1f384.png",
        "1F384",
        "Christmas tree",
        &["celebration", "tree"],
        6,
    ),
];

/// The two npm tarballs, in their real layout, holding only the fixture emoji (and a label
/// without an image, and an image in another size, which the demo must both leave out).
fn packages(dir: &Path) {
    let fixtures = workspace().join("tests/fixtures/emoji");
    let mut images: Vec<(String, Vec<u8>)> = EMOJI
        .iter()
        .map(|(file, ..)| {
            let bytes = std::fs::read(fixtures.join(file)).unwrap();
            (format!("package/img/google/64/{file}"), bytes)
        })
        .collect();
    images.push((
        "package/img/google/32/1f436.png".into(),
        std::fs::read(fixtures.join("1f436.png")).unwrap(),
    ));
    images.push(("package/package.json".into(), b"{}".to_vec()));
    tgz(&dir.join("emoji-datasource-google-16.0.0.tgz"), &images);

    let mut data: Vec<_> = EMOJI
        .iter()
        .map(|(_, hex, label, tags, group)| {
            json!({"label": label, "hexcode": hex, "tags": tags, "group": group, "subgroup": 1})
        })
        .collect();
    data.push(json!({"label": "unicorn", "hexcode": "1F984", "group": 3, "subgroup": 1}));
    let groups: Vec<_> = (0..8)
        .map(|o| json!({"key": format!("g{o}"), "message": format!("group {o}"), "order": o}))
        .collect();
    let messages =
        json!({"groups": groups, "subgroups": [{"key": "s", "message": "things", "order": 1}]});
    tgz(
        &dir.join("emojibase-data-17.0.0.tgz"),
        &[
            ("package/en/data.json", data_bytes(&data)),
            (
                "package/en/messages.json",
                messages.to_string().into_bytes(),
            ),
        ],
    );
}

fn data_bytes(v: &[serde_json::Value]) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn demo_args(data: &Path, packages: &Path) -> Vec<String> {
    vec![
        "demo".into(),
        "--data".into(),
        data.display().to_string(),
        "--packages".into(),
        packages.display().to_string(),
        "--model".into(),
        workspace().join(DEFAULT_MODEL).display().to_string(),
    ]
}

/// The model `lexlip demo` uses unless told otherwise, given by its path from the checkout
/// (the tests run elsewhere).
const DEFAULT_MODEL: &str = "models/emoji-lex-imagenet";

#[test]
fn the_demo_runs_the_model_these_tests_use() {
    let out = lexlip(&["demo", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(
        help.contains(&format!("[default: {DEFAULT_MODEL}]")),
        "{help}"
    );
}

#[test]
fn demo_builds_the_emoji_collection_reuses_it_and_serves_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let pkgs = tmp.path().join("packages");
    std::fs::create_dir(&pkgs).unwrap();
    packages(&pkgs);
    let data = tmp.path().join("demo");

    let mut build = demo_args(&data, &pkgs);
    build.push("--no-serve".into());
    let out = lexlip(&build);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("12 emoji with their labels"), "{err}");
    assert!(err.contains("lexlip index --manifest"), "{err}");
    assert!(err.contains("lexlip serve --data"), "{err}");
    // The printed commands work as printed: their program is this binary, by a path that
    // exists (no `lexlip` on the PATH here) or by the name on the PATH.
    let serve_line = err
        .lines()
        .find(|l| l.contains("serve it with: "))
        .expect("the serve command is printed");
    let program = serve_line
        .split("serve it with: ")
        .nth(1)
        .and_then(|rest| rest.split(" serve ").next())
        .unwrap();
    assert!(
        program == "lexlip" || std::path::Path::new(program).is_file(),
        "{program:?} is no program to run: {serve_line}"
    );
    let collection = data.join("collections/emoji");
    let docs = collections::contents(&collection);
    assert_eq!(docs.len(), 24, "12 images and their 12 labels: {docs:?}");
    assert!(docs.contains_key("1F436") && docs.contains_key("1F436#text"));
    assert!(
        !docs.keys().any(|id| id.starts_with("1F984")),
        "a label without an image"
    );

    // Idempotent: the second run reuses the extracted emoji and the collection.
    let out = lexlip(&build);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("reusing"), "{err}");
    assert!(err.contains("already indexed"), "{err}");
    assert_eq!(collections::contents(&collection), docs);

    // Served: the page, and a text→image search whose hits say which terms matched.
    let mut serve = demo_args(&data, &pkgs);
    serve.extend(["--addr".into(), "127.0.0.1:0".into()]);
    let server = Server::spawn(&serve);
    let page = ureq::get(&server.url("/"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(page.contains("<title>lexlip search</title>"));
    let (status, found) = server.call(
        "POST",
        "/v1/collections/emoji/search",
        Some(&json!({"query": {"text": "a dog"}, "target": "image", "k": 12, "explain": true})),
    );
    assert_eq!(status, 200, "{found}");
    let hits = found["hits"].as_array().unwrap();
    // Only images sharing a term with the query are hits (64 terms per image).
    assert!(!hits.is_empty() && hits.len() <= 12, "{found}");
    assert_eq!(hits[0]["id"], "1F436", "the dog face first: {found}");
    assert!(hits.iter().all(|h| h["modality"] == "image"));
    assert!(
        hits[0]["explain"].as_array().is_some_and(|t| !t.is_empty()),
        "{found}"
    );
    server.stop();
}

#[test]
fn demo_refuses_bad_input_before_writing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("demo");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();

    let mut args = demo_args(&data, &empty);
    args.push("--no-serve".into());
    let out = lexlip(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("emoji-datasource-google-16.0.0.tgz not found in --packages"),
        "{err}"
    );
    assert!(!data.join("collections").exists(), "nothing is indexed");

    let out = lexlip(&[
        "demo",
        "--data",
        &data.display().to_string(),
        "--model",
        "no/such/model",
        "--no-serve",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no model at no/such/model") && err.contains("--model"),
        "{err}"
    );
    assert!(!data.exists(), "nothing is written");

    // A port in use is said first, with the flag that picks another, before any work.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut busy = demo_args(&data, &empty);
    busy.extend(["--addr".into(), addr.clone()]);
    let out = lexlip(&busy);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("--addr"),
        "{err}"
    );
    assert!(
        !err.contains("open http"),
        "no invitation before the port: {err}"
    );
    assert!(!data.exists(), "nothing is written");

    // Tarballs that are not the packages: a clear error naming the file.
    std::fs::write(
        empty.join("emoji-datasource-google-16.0.0.tgz"),
        b"not a tarball",
    )
    .unwrap();
    std::fs::write(empty.join("emojibase-data-17.0.0.tgz"), b"not a tarball").unwrap();
    let out = lexlip(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("emoji-datasource-google-16.0.0.tgz"), "{err}");
    assert!(!data.join("collections").exists());
}
