//! `lexlip model convert` on the tiny LexLIP checkpoint: the directory it writes encodes exactly
//! like the checkpoint it came from, and bad arguments are refused clearly.

use std::path::Path;
use std::process::Command;

use lexlip_tests::{fixtures, lexlip, lexlip_json, splade_dir, success_json};

fn encode(model: &Path, extra: &[&str], what: &[&str]) -> serde_json::Value {
    let mut args = vec!["encode", "--model", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(what);
    lexlip_json(&args)
}

#[test]
fn converted_checkpoint_encodes_like_the_checkpoint() {
    let ckpt = fixtures().join("lexlip-tiny/lexlip-tiny.ckpt");
    let tokenizer = fixtures().join("lexlip-tiny/tokenizer.json");
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("lexlip");
    let convert = || {
        lexlip(&[
            "model",
            "convert",
            ckpt.to_str().unwrap(),
            out_dir.to_str().unwrap(),
            "--tokenizer",
            tokenizer.to_str().unwrap(),
        ])
    };
    let out = convert();
    lexlip_tests::assert_success(&out);
    let tok = ["--tokenizer", tokenizer.to_str().unwrap()];
    let image = fixtures().join("images/img1_64.png");
    for what in [
        vec!["--text", "a dog runs on the grass"],
        vec!["--image", image.to_str().unwrap()],
    ] {
        let from_ckpt = encode(&ckpt, &tok, &what);
        let from_dir = encode(&out_dir, &[], &what);
        assert!(!from_ckpt["terms"].as_object().unwrap().is_empty());
        assert_eq!(from_ckpt["terms"], from_dir["terms"], "{what:?}");
    }
    // A second conversion into the same, now non-empty directory is refused.
    let again = convert();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    // Not a checkpoint: an error naming the file.
    let bad = tmp.path().join("weights.bin");
    std::fs::write(&bad, b"nonsense").unwrap();
    let out = lexlip(&[
        "model",
        "convert",
        bad.to_str().unwrap(),
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("weights.bin"));
}

/// `--model hf:OWNER/NAME` finds a model in the Hugging Face cache (HF_HOME) without the network.
#[test]
fn hub_model_ids_resolve_from_the_cache_offline() {
    let home = tempfile::tempdir().unwrap();
    let files =
        ["config.json", "tokenizer.json", "model.safetensors"].map(|f| (f, splade_dir().join(f)));
    lexlip_tests::hf_cache_repo(home.path(), "lexlip-test/splade-tiny", &files);
    let run = |model: &str| {
        let args = [
            "encode",
            "--model",
            model,
            "--text",
            "a dog on the grass",
            "--json",
        ];
        success_json(&lexlip_tests::lexlip_offline(home.path(), &args))
    };
    let local = run(splade_dir().to_str().unwrap());
    let hub = run("hf:lexlip-test/splade-tiny");
    assert_eq!(local["terms"], hub["terms"]);
    // Not in the cache and no network: a clear error naming the repository.
    let out = Command::new(lexlip_tests::lexlip_bin())
        .args(["encode", "--model", "hf:lexlip-test/absent", "--text", "x"])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lexlip-test/absent"));
}
