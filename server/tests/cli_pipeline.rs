//! Batch indexing of corpora with the real binary and the tiny LexLIP checkpoint: every input
//! format on a generated corpus with corrupt, missing and empty items (exact counts and errors
//! file), SIGKILL mid-run then resume == a clean run, and shards merged == one run.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lexlip_tests::lexlip_tiny_args as model_args;
use lexlip_tests::{
    Flags, contents, hit_ids, hit_numbers, impacts, lexlip, lexlip_json, lexlip_tiny_line, line,
};
use serde_json::Value;

/// `lexlip index --collection COLLECTION WORDS FLAGS`, with the tiny LexLIP model unless the
/// input is `--vectors`: every indexing run of this suite.
fn index_line(collection: &Path, words: &str, flags: &Flags) -> Vec<OsString> {
    let mut args = line(&format!("index {words}"), &[("--collection", &collection)]);
    args.extend(line("", flags));
    if !flags.iter().any(|(flag, _)| *flag == "--vectors") {
        args.extend(model_args().into_iter().map(OsString::from));
    }
    args
}

/// The collection `dir/NAME` and the file `dir/NAME-errors.jsonl` for its run's `--errors`.
fn with_errors(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (dir.join(name), dir.join(format!("{name}-errors.jsonl")))
}

/// [`index_line`] with `--json`, run; its summary.
fn index(collection: &Path, words: &str, flags: &Flags) -> Value {
    lexlip_json(&index_line(collection, &format!("{words} --json"), flags))
}

/// `lexlip merge INTO PARTS… WORDS`.
fn merge(into: &Path, parts: &[&Path], words: &str) -> Output {
    let mut args = vec![OsString::from("merge"), into.into()];
    args.extend(parts.iter().map(|p| p.as_os_str().to_owned()));
    args.extend(line(words, &[]));
    lexlip(&args)
}

/// A small PNG whose colours depend on `seed`.
fn png(seed: u32) -> Vec<u8> {
    lexlip_tests::png(seed, 32)
}

const WORDS: &[&str] = &[
    "dog", "cat", "red", "car", "grass", "man", "woman", "table", "street", "blue",
];

fn caption(i: usize, j: usize) -> String {
    format!(
        "a {} {} near the {}",
        WORDS[i % 10],
        WORDS[(i / 10 + j) % 10],
        WORDS[(i + 3 * j) % 10]
    )
}

/// A TSV corpus: `good` images with 2 captions each, `corrupt` corrupt image files, `missing`
/// rows whose file does not exist, `empty` empty captions, and one malformed line.
struct TsvCorpus {
    tsv: PathBuf,
    good: usize,
    corrupt: usize,
    missing: usize,
    empty: usize,
}

fn tsv_corpus(dir: &Path, good: usize) -> TsvCorpus {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    let (corrupt, missing, empty) = (3, 2, 4);
    for i in 0..good + corrupt + missing {
        let file = format!("images/{i:04}.png");
        if i < good {
            std::fs::write(dir.join(&file), png(i as u32)).unwrap();
        } else if i < good + corrupt {
            std::fs::write(dir.join(&file), b"\x89PNG\r\n\x1a\nnot really a png").unwrap();
        }
        for j in 0..2 {
            let text = if i < empty && j == 1 {
                String::new()
            } else {
                caption(i, j)
            };
            tsv.push_str(&format!("{text}\t{file}\timg{i:04}\n"));
        }
    }
    tsv.push_str("a line with too few fields\n");
    let path = dir.join("captions.tsv");
    std::fs::write(&path, tsv).unwrap();
    TsvCorpus {
        tsv: path,
        good,
        corrupt,
        missing,
        empty,
    }
}

#[test]
fn tsv_counts_errors_and_search() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tsv_corpus(tmp.path(), 40);
    let (coll, errors) = with_errors(tmp.path(), "coll");
    let tsv_errors = |errors: &Path| {
        index(
            &coll,
            "--batch-size 8",
            &[("--tsv", &corpus.tsv), ("--errors", &errors)],
        )
    };
    let s = tsv_errors(&errors);
    let images = corpus.good + corpus.corrupt + corpus.missing;
    let texts = 2 * images;
    assert_eq!(s["read"], (images + texts + 1) as u64, "{s}");
    let skipped = corpus.corrupt + corpus.missing + corpus.empty + 1;
    assert_eq!(s["indexed"], (images + texts - skipped + 1) as u64, "{s}");
    assert_eq!(s["skipped"]["corrupt_image"], corpus.corrupt as u64);
    assert_eq!(s["skipped"]["missing_file"], corpus.missing as u64);
    assert_eq!(s["skipped"]["empty_caption"], corpus.empty as u64);
    assert_eq!(s["skipped"]["bad_line"], 1);
    for key in [
        "seconds",
        "items_per_s",
        "index_bytes",
        "bytes_per_item",
        "bytes_per_nnz",
    ] {
        assert!(s[key].as_f64().unwrap() > 0.0, "{key}: {s}");
    }
    let lines: Vec<Value> = std::fs::read_to_string(&errors)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), skipped);
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "corrupt_image" && l["id"] == "img0040")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "missing_file" && l["id"] == "img0044")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["reason"] == "empty_caption" && l["id"] == "img0000#1")
    );

    let docs = contents(&coll);
    assert_eq!(docs.len(), s["indexed"].as_u64().unwrap() as usize);
    assert!(docs["img0007"].starts_with("Image"));
    assert!(
        docs["img0007#1"].contains("\"image_id\": String(\"img0007\")"),
        "{}",
        docs["img0007#1"]
    );
    assert!(
        !docs.contains_key("img0041"),
        "corrupt images are not indexed"
    );
    // Search finds an indexed image by its own terms.
    let image = tmp.path().join("images/0007.png");
    let terms = lexlip_json(&lexlip_tiny_line("encode --json", &[("--image", &image)]));
    let vector = |terms: &Value| line("", &[("--vector", &terms["terms"].to_string())]);
    let mut args = line(
        "search --modality image -k 1000 --json",
        &[("--collection", &coll)],
    );
    args.extend(vector(&terms));
    let ids = hit_ids(&lexlip_json(&args));
    assert!(ids.iter().any(|id| id == "img0007"), "{ids:?}");
    assert_eq!(ids.len(), corpus.good);
    // A query in words or an image, encoded by lexlip search itself, ranks as the vector that
    // `lexlip encode` writes for it (the same encoder, then the same search).
    let text_terms = lexlip_json(&lexlip_tiny_line(
        "encode --json",
        &[("--text", &"a red square")],
    ));
    let search = |query: Vec<OsString>| {
        // Every document: an image query would otherwise find the collection's texts only.
        let mut args = line(
            "search -k 20 --modality any --json",
            &[("--collection", &coll)],
        );
        args.extend(query);
        let out = lexlip_json(&args);
        let hits = lexlip_tests::hit_scores(&out);
        assert_eq!(out["path"], "sparse", "{out}");
        hits
    };
    let by_image = search(lexlip_tiny_line("", &[("--image", &image)]));
    assert_eq!(by_image, search(vector(&terms)));
    assert!(
        by_image.iter().any(|(id, _)| id == "img0007"),
        "{by_image:?}"
    );
    let by_text = search(lexlip_tiny_line("", &[("--text", &"a red square")]));
    assert_eq!(by_text, search(vector(&text_terms)));
    assert!(!by_text.is_empty());
    // Refusals say what to add.
    let out = lexlip(&line(
        "search",
        &[("--collection", &coll), ("--text", &"a dog")],
    ));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--text needs --model"), "{stderr}");
    let out = lexlip(&lexlip_tiny_line(
        "search --mode dense",
        &[("--collection", &coll), ("--image", &image)],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dense search off"), "{stderr}");

    // Re-running a finished job does nothing and changes nothing (it reports the job's counts).
    let errors_text = std::fs::read_to_string(&errors).unwrap();
    let again = tsv_errors(&errors);
    assert_eq!(again["already_complete"], true, "{again}");
    assert_eq!(again["read"], s["read"]);
    assert_eq!(again["skipped"], s["skipped"]);
    assert_eq!(contents(&coll), docs);
    assert_eq!(std::fs::read_to_string(&errors).unwrap(), errors_text);
    // The list of a finished job is copied to a new --errors file without indexing again.
    let errors2 = tmp.path().join("errors2.jsonl");
    let again = tsv_errors(&errors2);
    assert_eq!(again["already_complete"], true, "{again}");
    assert_eq!(std::fs::read_to_string(&errors2).unwrap(), errors_text);
    // A changed input is not taken for the indexed one.
    let mut text = std::fs::read_to_string(&corpus.tsv).unwrap();
    text.push_str("a new caption of a dog\timages/0001.png\timg0001\n");
    std::fs::write(&corpus.tsv, text).unwrap();
    // It starts over, and says why before it starts.
    let out = lexlip(&index_line(
        &coll,
        "--batch-size 8 --json",
        &[("--tsv", &corpus.tsv)],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the saved progress belongs to another run"),
        "{stderr}"
    );
    // The first skipped items are printed as they are found, with file:line and reason, then
    // where the whole list is.
    let tsv_name = corpus.tsv.display().to_string();
    assert!(
        stderr.contains(&format!(
            "skipped img0000#1 (empty_caption): {tsv_name}:3: empty caption"
        )),
        "{stderr}"
    );
    let printed = stderr.lines().filter(|l| l.starts_with("skipped ")).count();
    assert_eq!(printed, 5, "{stderr}");
    assert!(
        stderr.contains("more items skipped: all of them are listed in"),
        "{stderr}"
    );
    assert!(stderr.contains("skipped items are listed in"), "{stderr}");
    let changed = lexlip_tests::success_json(&out);
    assert!(changed.get("already_complete").is_none(), "{changed}");

    // A model changed in place (new weights under the same path) is not taken for the one
    // that indexed: the same command with a copy of the model, then the copy rewritten.
    let model_dir = tmp.path().join("model");
    std::fs::create_dir(&model_dir).unwrap();
    let original = model_args();
    let ckpt = model_dir.join("model.ckpt");
    std::fs::copy(&original[1], &ckpt).unwrap();
    let copied = |collection: &Path| {
        let mut args = line(
            "index --batch-size 8 --json",
            &[
                ("--collection", &collection),
                ("--tsv", &corpus.tsv),
                ("--model", &ckpt),
            ],
        );
        args.extend(original[2..].iter().map(OsString::from));
        lexlip(&args)
    };
    let fresh = tmp.path().join("fresh");
    assert!(copied(&fresh).status.success());
    let again = lexlip_tests::success_json(&copied(&fresh));
    assert_eq!(again["already_complete"], true, "{again}");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&ckpt, std::fs::read(&original[1]).unwrap()).unwrap();
    let out = copied(&fresh);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the saved progress belongs to another run"),
        "{stderr}"
    );
    assert_eq!(changed["indexed"], s["indexed"].as_u64().unwrap() + 1);
    let docs = contents(&coll);
    assert!(docs["img0001#2"].contains("a new caption of a dog"));
}

#[test]
fn manifest_webdataset_and_image_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("img/sub")).unwrap();
    let mut manifest = String::new();
    for i in 0..10 {
        std::fs::write(dir.join(format!("img/{i}.png")), png(i)).unwrap();
        manifest.push_str(&format!(
            "{{\"id\": \"m{i}\", \"image\": \"img/{i}.png\", \"text\": \"{}\", \"metadata\": {{\"n\": {i}}}}}\n",
            caption(i as usize, 0)
        ));
    }
    manifest.push_str("{\"id\": \"m3\", \"text\": \"the same id again\"}\n");
    manifest.push_str("{not json\n");
    manifest.push_str("{\"id\": \"m20\", \"image\": \"img/missing.png\"}\n");
    let mpath = dir.join("manifest.jsonl");
    std::fs::write(&mpath, manifest).unwrap();
    let s = index(&dir.join("c1"), "", &[("--manifest", &mpath)]);
    assert_eq!(s["read"], 23, "{s}");
    assert_eq!(s["indexed"], 20, "{s}");
    assert_eq!(s["skipped"]["duplicate_id"], 1);
    assert_eq!(s["skipped"]["bad_line"], 1);
    assert_eq!(s["skipped"]["missing_file"], 1);
    let docs = contents(&dir.join("c1"));
    assert!(docs["m4"].contains("\"n\": Number(4)"), "{}", docs["m4"]);
    assert!(docs.contains_key("m4#text"));

    // WebDataset: 10 samples + one with a corrupt image (its caption is still indexed).
    let tar_path = dir.join("shard-00000.tar");
    let mut builder = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
    let mut add = |name: &str, data: &[u8]| {
        lexlip_pipeline::sources::webdataset::append_member(&mut builder, name, data).unwrap();
    };
    for i in 0..11u32 {
        let key = format!("{i:09}");
        let img = if i == 10 {
            b"garbage".to_vec()
        } else {
            png(100 + i)
        };
        add(&format!("{key}.png"), &img);
        add(&format!("{key}.txt"), caption(i as usize, 1).as_bytes());
        add(
            &format!("{key}.json"),
            format!("{{\"key\": \"{key}\", \"width\": 32}}").as_bytes(),
        );
    }
    builder.finish().unwrap();
    drop(builder);
    let s = index(&dir.join("c2"), "", &[("--webdataset", &dir)]);
    assert_eq!(s["read"], 22, "{s}");
    assert_eq!(s["indexed"], 21, "{s}");
    assert_eq!(s["skipped"]["corrupt_image"], 1);
    let docs = contents(&dir.join("c2"));
    assert!(docs["000000003"].contains("\"width\": Number(32)"));
    assert!(docs.contains_key("000000010#text"));

    // A directory of images (recursive), with a corrupt one.
    std::fs::write(dir.join("img/sub/bad.png"), b"nope").unwrap();
    std::fs::write(dir.join("img/sub/a.png"), png(99)).unwrap();
    let s = index(&dir.join("c3"), "", &[("--images", &dir.join("img"))]);
    assert_eq!(s["read"], 12, "{s}");
    assert_eq!(s["indexed"], 11, "{s}");
    assert!(contents(&dir.join("c3")).contains_key("sub/a.png"));

    // --strict stops at the first bad item with an error naming it.
    let out = lexlip(&index_line(
        &dir.join("c4"),
        "--strict",
        &[("--manifest", &mpath)],
    ));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate_id"));

    // An input without items (an empty directory) indexes nothing: an error.
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let out = lexlip(&index_line(
        &dir.join("c6"),
        "",
        &[("--images", &dir.join("empty"))],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was indexed"), "{err}");

    // A missing input is an error naming it, and creates nothing.
    for input in [
        "--tsv",
        "--manifest",
        "--webdataset",
        "--images",
        "--vectors",
    ] {
        // The tiny model with every input but `--vectors`.
        let out = lexlip(&index_line(
            &dir.join("c5"),
            "",
            &[(input, &dir.join("absent"))],
        ));
        assert!(!out.status.success(), "{input}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("absent"),
            "{input}"
        );
        assert!(!dir.join("c5").exists(), "{input} created a collection");
    }
}

/// Starts [`index_line`] in the background.
fn spawn_index(collection: &Path, words: &str, flags: &Flags) -> std::process::Child {
    Command::new(lexlip_tests::lexlip_bin())
        .args(index_line(collection, words, flags))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the run's last commit is past `position` (and not the final one).
fn wait_for_commit_past(collection: &Path, position: u64) -> u64 {
    let progress = collection.join("pipeline-progress.json");
    let start = Instant::now();
    loop {
        let p: Option<Value> = std::fs::read_to_string(&progress)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if let Some(p) = p.filter(|p| p["position"].as_u64() > Some(position)) {
            assert_eq!(
                p["complete"], false,
                "the run finished before it was stopped"
            );
            return p["position"].as_u64().unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn saved_position(collection: &Path) -> u64 {
    let text = std::fs::read_to_string(collection.join("pipeline-progress.json")).unwrap();
    let p: Value = serde_json::from_str(&text).unwrap();
    p["position"].as_u64().unwrap()
}

#[test]
fn killed_run_resumes_to_the_same_collection() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tsv_corpus(tmp.path(), 300);
    let (clean, clean_errors) = with_errors(tmp.path(), "clean");
    let opts = "--batch-size 4 --commit-every 8";
    let clean_summary = index(
        &clean,
        opts,
        &[("--tsv", &corpus.tsv), ("--errors", &clean_errors)],
    );

    // kill -9 after a few commits.
    let (resumed, errors) = with_errors(tmp.path(), "resumed");
    let run: &Flags = &[("--tsv", &corpus.tsv), ("--errors", &errors)];
    let mut child = spawn_index(&resumed, opts, run);
    let killed_at = wait_for_commit_past(&resumed, 40);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(saved_position(&resumed) >= killed_at);

    // Ctrl-C (SIGINT) in the resumed run: it commits what it read and exits non-zero.
    let child = spawn_index(&resumed, opts, run);
    let before = wait_for_commit_past(&resumed, saved_position(&resumed) + 40);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let stopped_at = saved_position(&resumed);
    assert!(stopped_at >= before, "{stopped_at} < {before}");

    // The same command again finishes the job: the collection, the summary's counts and the
    // errors file are a clean run's.
    let s = index(&resumed, opts, run);
    assert_eq!(s["resumed_from"].as_u64(), Some(stopped_at), "{s}");
    for key in ["read", "indexed", "skipped"] {
        assert_eq!(s[key], clean_summary[key], "{key}: {s} vs {clean_summary}");
    }
    assert_eq!(contents(&resumed), contents(&clean));
    assert_eq!(
        std::fs::read_to_string(&errors).unwrap(),
        std::fs::read_to_string(&clean_errors).unwrap()
    );
}

#[test]
fn shards_merged_equal_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tsv_corpus(tmp.path(), 30);
    let whole = tmp.path().join("whole");
    index(&whole, "", &[("--tsv", &corpus.tsv)]);
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| tmp.path().join(format!("part{i}")))
        .collect();
    let mut total = 0;
    for (i, p) in parts.iter().enumerate() {
        let s = index(p, &format!("--shard {i}/2"), &[("--tsv", &corpus.tsv)]);
        total += s["indexed"].as_u64().unwrap();
        assert!(s["indexed"].as_u64().unwrap() > 0);
    }
    let merged = tmp.path().join("merged");
    let report = lexlip_tests::success_json(&merge(&merged, &[&parts[0], &parts[1]], "--json"));
    assert_eq!(report["documents"].as_u64(), Some(total));
    assert_eq!(contents(&merged), contents(&whole));

    // A collection with another term space is refused, naming both.
    let other = tmp.path().join("other");
    let vectors = tmp.path().join("v.jsonl");
    let mut f = std::fs::File::create(&vectors).unwrap();
    writeln!(f, "{{\"id\": \"x\", \"vector\": {{\"dog\": 3}}}}").unwrap();
    let out = lexlip(&index_line(&other, "", &[("--vectors", &vectors)]));
    assert!(out.status.success());
    let out = merge(&tmp.path().join("m2"), &[&whole, &other], "");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("whole") && err.contains("other"), "{err}");
    assert!(
        !tmp.path().join("m2").exists(),
        "nothing written on refusal"
    );
}

/// `n` JsonVectorCollection lines (8 terms each) in `dir/v.jsonl`, whose path it returns; every
/// 1000th line is malformed JSON and every 1000th (offset 500) has a negative weight.
fn vectors_file(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("v.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..n {
        if i % 1000 == 999 {
            writeln!(out, "{{\"id\": \"d{i}\", \"vector\": ").unwrap();
            continue;
        }
        let weight = if i % 1000 == 500 {
            -1
        } else {
            1 + (i % 97) as i64
        };
        let terms: Vec<String> = (0..8)
            .map(|j| format!("\"t{}\": {}", (i * 7 + j * 131) % 3000, weight + j as i64))
            .collect();
        writeln!(
            out,
            "{{\"id\": \"d{i}\", \"vector\": {{{}}}}}",
            terms.join(", ")
        )
        .unwrap();
    }
    path
}

#[test]
fn vectors_resume_shards_and_strict() {
    let tmp = tempfile::tempdir().unwrap();
    let vectors = vectors_file(tmp.path(), 60_000);
    let (clean, clean_errors) = with_errors(tmp.path(), "clean");
    let s = index(
        &clean,
        "",
        &[("--vectors", &vectors), ("--errors", &clean_errors)],
    );
    assert_eq!(s["read"], 60_000);
    assert_eq!(s["skipped"]["json"], 60);
    assert_eq!(s["skipped"]["vector"], 60);
    assert_eq!(s["indexed"], 60_000 - 120);
    let whole = contents(&clean);

    // kill -9 after the first commit (commits every 20,000-line chunk), then the same command.
    let (resumed, errors) = with_errors(tmp.path(), "resumed");
    let run: &Flags = &[("--vectors", &vectors), ("--errors", &errors)];
    let mut child = spawn_index(&resumed, "--commit-every 1 --json", run);
    wait_for_commit_past(&resumed, 0);
    child.kill().unwrap();
    child.wait().unwrap();
    let r = index(&resumed, "--commit-every 1", run);
    assert!(r["resumed_from"].as_u64() > Some(0), "{r}");
    for key in ["read", "indexed", "skipped"] {
        assert_eq!(r[key], s[key], "{key}");
    }
    assert_eq!(contents(&resumed), whole);
    assert_eq!(
        std::fs::read_to_string(&errors).unwrap(),
        std::fs::read_to_string(&clean_errors).unwrap()
    );
    // --merge-segments on the finished input: one segment, the same documents and search.
    let stats = |dir: &PathBuf| lexlip_json(&line("stats --json", &[("--collection", dir)]));
    assert!(stats(&resumed)["segments"].as_u64() > Some(1));
    let search = |dir: &PathBuf| {
        // Scores only: ties at the last place may be broken by another document order.
        let query = "{\"t1\": 3, \"t7\": 5}";
        let args = line(
            "search -k 20 --json",
            &[("--collection", dir), ("--vector", &query)],
        );
        hit_numbers(&lexlip_json(&args), "score")
    };
    let before = search(&resumed);
    assert_eq!(before.len(), 20);
    let r = index(&resumed, "--merge-segments", &[("--vectors", &vectors)]);
    assert!(r["merge_seconds"].as_f64() >= Some(0.0), "{r}");
    assert_eq!(stats(&resumed)["segments"], 1);
    assert_eq!(contents(&resumed), whole);
    assert_eq!(search(&resumed), before);

    // Two shards merged equal the whole; their counts add up to it.
    let parts: Vec<PathBuf> = (0..2).map(|i| tmp.path().join(format!("p{i}"))).collect();
    let mut read = 0;
    for (i, p) in parts.iter().enumerate() {
        let ps = index(p, &format!("--shard {i}/2"), &[("--vectors", &vectors)]);
        read += ps["read"].as_u64().unwrap();
        assert!(ps["indexed"].as_u64().unwrap() > 20_000, "{ps}");
    }
    assert_eq!(read, 60_000);
    let merged = tmp.path().join("merged");
    assert!(merge(&merged, &[&parts[0], &parts[1]], "").status.success());
    assert_eq!(contents(&merged), whole);
    // Merged into an existing collection: each merge commits its own segment; with
    // --merge-segments (the second part again: same ids, replaced) they become one.
    let twice = tmp.path().join("twice");
    let merge_into = |part: &Path, words: &str| {
        assert!(merge(&twice, &[part], words).status.success());
    };
    merge_into(&parts[0], "");
    merge_into(&parts[1], "");
    assert!(stats(&twice)["segments"].as_u64() >= Some(2));
    merge_into(&parts[1], "--merge-segments");
    assert_eq!(stats(&twice)["segments"], 1);
    assert_eq!(contents(&twice), whole);

    // --strict stops at the first bad line, naming it.
    let strict = tmp.path().join("strict");
    let out = lexlip(&index_line(&strict, "--strict", &[("--vectors", &vectors)]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--strict") && err.contains("line 501"),
        "{err}"
    );
}

#[test]
fn one_corpus_in_every_format() {
    // 200 images, 3 corrupt and 2 missing (listed, but no file / no image in the shard), with
    // one caption each, 3 of them empty — as a TSV, a manifest, two WebDataset shards and a
    // directory. Exact counts per format, and the same image or caption gets the same vector
    // whichever format it came from.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (n, corrupt, missing, empty) = (
        200usize,
        [17usize, 101, 150],
        [33usize, 180],
        [5usize, 60, 199],
    );
    std::fs::create_dir_all(dir.join("images")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    let mut manifest = String::new();
    let mut shards: Vec<tar::Builder<std::fs::File>> = (0..2)
        .map(|s| tar::Builder::new(std::fs::File::create(dir.join(format!("{s:05}.tar"))).unwrap()))
        .collect();
    for i in 0..n {
        let bytes = if corrupt.contains(&i) {
            b"\x89PNG\r\n\x1a\ncorrupt".to_vec()
        } else {
            png(1000 + i as u32)
        };
        if !missing.contains(&i) {
            std::fs::write(dir.join(format!("images/{i:04}.png")), &bytes).unwrap();
        }
        let text = if empty.contains(&i) {
            String::new()
        } else {
            caption(i, 2)
        };
        tsv.push_str(&format!("{text}\timages/{i:04}.png\timg{i:04}\n"));
        manifest.push_str(&format!(
            "{{\"id\": \"img{i:04}\", \"image\": \"images/{i:04}.png\", \"text\": \"{text}\"}}\n"
        ));
        let b = &mut shards[i / 100];
        let mut put = |name: String, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        };
        if !missing.contains(&i) {
            put(format!("img{i:04}.png"), &bytes);
        }
        put(format!("img{i:04}.txt"), text.as_bytes());
        put(
            format!("img{i:04}.json"),
            format!("{{\"n\": {i}}}").as_bytes(),
        );
    }
    for b in shards {
        b.into_inner().unwrap();
    }
    std::fs::write(dir.join("c.tsv"), tsv).unwrap();
    std::fs::write(dir.join("m.jsonl"), manifest).unwrap();

    let (bad_images, missing_n, empty_n) = (
        corrupt.len() as u64,
        missing.len() as u64,
        empty.len() as u64,
    );
    let images = n as u64;
    let every = 2 * images - bad_images - missing_n - empty_n;
    let runs = [
        // (name, input, read, indexed)
        ("tsv", "c.tsv", 2 * images, every),
        ("manifest", "m.jsonl", 2 * images, every),
        // A sample without its image is one bad item (its caption is not indexed alone).
        (
            "webdataset",
            "*.tar",
            2 * images - missing_n,
            every - missing_n,
        ),
        (
            "images",
            "images",
            images - missing_n,
            images - missing_n - bad_images,
        ),
    ];
    let mut collections = BTreeMap::new();
    for (name, input, read, indexed) in runs {
        let (coll, errors) = with_errors(dir, &format!("c-{name}"));
        let flag = format!("--{name}");
        let s = index(
            &coll,
            "",
            &[(&flag, &dir.join(input)), ("--errors", &errors)],
        );
        assert_eq!(
            (s["read"].as_u64(), s["indexed"].as_u64()),
            (Some(read), Some(indexed)),
            "{name}: {s}"
        );
        let mut want = serde_json::Map::new();
        want.insert("corrupt_image".into(), bad_images.into());
        if name != "images" {
            want.insert("missing_file".into(), missing_n.into());
            want.insert("empty_caption".into(), empty_n.into());
        }
        assert_eq!(s["skipped"], Value::Object(want), "{name}");
        let lines = std::fs::read_to_string(&errors).unwrap().lines().count() as u64;
        assert_eq!(lines, read - indexed, "{name}: errors file");
        collections.insert(name, impacts(&coll));
    }
    // The same image (and caption) gives the same vector in every format.
    let tsv = &collections["tsv"];
    for i in [0usize, 1, 42, 199] {
        let id = format!("img{i:04}");
        let v = &tsv[&id];
        assert!(!v.is_empty());
        assert_eq!(&collections["manifest"][&id], v, "{id}");
        assert_eq!(&collections["webdataset"][&id], v, "{id}");
        assert_eq!(&collections["images"][&format!("{i:04}.png")], v, "{id}");
        if !empty.contains(&i) {
            let t = &tsv[&format!("{id}#0")];
            assert_eq!(&collections["manifest"][&format!("{id}#text")], t, "{id}");
            assert_eq!(&collections["webdataset"][&format!("{id}#text")], t, "{id}");
        }
    }
}

/// With stderr not a terminal (a log, a container), indexing still says how far it is: lines
/// with done/total, rate and ETA, then a last one; as JSON objects with `--log-format json`.
#[test]
fn progress_lines_when_stderr_is_no_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tsv_corpus(tmp.path(), 12);
    for (format, coll) in [("human", "text-log"), ("json", "json-log")] {
        let args = lexlip_tiny_line(
            &format!("--log-format {format} index"),
            &[
                ("--collection", &tmp.path().join(coll)),
                ("--tsv", &corpus.tsv),
            ],
        );
        let out = Command::new(lexlip_tests::lexlip_bin())
            .args(&args)
            .env("LEXLIP_PROGRESS_SECS", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        lexlip_tests::assert_success(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let progress: Vec<&str> = stderr.lines().filter(|l| l.contains("indexing")).collect();
        assert!(progress.len() >= 2, "{stderr}");
        let last = progress.last().unwrap();
        if format == "human" {
            assert!(
                progress
                    .iter()
                    .any(|l| l.contains(" items/s") && l.contains("ETA")),
                "{stderr}"
            );
            assert!(
                last.starts_with("indexing: ") && last.contains("done in"),
                "{last}"
            );
            // The last line counts every item of the input: done = total.
            let counts = last["indexing: ".len()..].split(" items").next().unwrap();
            let (done, total) = counts.split_once('/').unwrap();
            assert_eq!(done, total, "{last}");
            assert!(total.parse::<u64>().unwrap() > 0, "{last}");
        } else {
            for line in &progress {
                let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                assert_eq!(v["fields"]["message"], "indexing");
                assert!(v["fields"]["done"].as_u64().is_some(), "{line}");
                assert!(v["fields"]["total"].as_u64().is_some(), "{line}");
            }
            let v: Value = serde_json::from_str(last).unwrap();
            assert_eq!(v["fields"]["finished"], true);
            assert_eq!(v["fields"]["done"], v["fields"]["total"]);
        }
    }
}
