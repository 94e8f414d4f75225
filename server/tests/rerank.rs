//! The MaskVLM re-ranker end to end, as a user runs it: `lexlip train --objective rerank` on top
//! of the shipped lexicon model, `lexlip serve --rerank-model`, `"rerank": {"top": N}` in a
//! search, and `lexlip eval --rerank-model`.
//!
//! - re-ranking only reorders first-stage candidates, and each hit says which stage scored it;
//! - with `rerank` left out, results are those of a server without a re-ranker;
//! - the served scores equal the re-ranker's, and scoring candidates together equals scoring
//!   them one by one;
//! - bad options are 422s that say what to do.

use std::path::Path;

use lexlip_model::Reranker;
use lexlip_tests::{
    EMOJI, Server, emoji_model, emoji_png, hit_ids, hit_numbers, hits, index_emoji, lexlip,
    lexlip_json, line,
};
use serde_json::{Value, json};

/// A caption TSV of the twelve emoji (two wordings each) next to copies of their PNGs.
fn corpus(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("images")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    for (file, label) in EMOJI {
        std::fs::copy(emoji_png(file), dir.join(format!("images/{file}.png"))).unwrap();
        tsv.push_str(&format!("{label}\timages/{file}.png\t{file}\n"));
        tsv.push_str(&format!(
            "a picture of a {label}\timages/{file}.png\t{file}\n"
        ));
    }
    let path = dir.join("corpus.tsv");
    std::fs::write(&path, tsv).unwrap();
    path
}

fn train(tsv: &Path, out: &Path) -> std::process::Output {
    lexlip(&line(
        "train --objective rerank --max-length 24 --batch-size 8 --steps 3 \
         --rerank-negatives 4 --json",
        &[("--init", &emoji_model()), ("--tsv", &tsv), ("--out", &out)],
    ))
}

fn search(s: &Server, body: Value) -> (u16, Value) {
    s.call("POST", "/v1/collections/emoji/search", Some(&body))
}

#[test]
fn a_trained_reranker_reorders_first_stage_candidates_only() {
    let work = tempfile::tempdir().unwrap();
    let tsv = corpus(&work.path().join("corpus"));
    let model = work.path().join("rerank");

    // Training writes a re-ranker directory, with its record; the same command resumes
    // (here: finds the run complete).
    let out = train(&tsv, &model);
    lexlip_tests::assert_success(&out);
    for file in [
        "rerank.json",
        "fusion/model.safetensors",
        "text/config.json",
        "image/config.json",
        "train.json",
    ] {
        assert!(model.join(file).is_file(), "{file} missing");
    }
    let record: Value =
        serde_json::from_slice(&std::fs::read(model.join("train.json")).unwrap()).unwrap();
    assert_eq!(record["status"], "complete");
    assert_eq!(record["summary"]["steps_done"], 3);
    let written = std::fs::read(model.join("train.json")).unwrap();
    let again = train(&tsv, &model);
    lexlip_tests::assert_success(&again);
    // The record still describes the run that trained the model.
    assert_eq!(std::fs::read(model.join("train.json")).unwrap(), written);

    // First stage alone: a server without a re-ranker.
    let data = work.path().join("data");
    let plain = {
        let s = Server::with_model(&data, &emoji_model());
        index_emoji(&s, "emoji");
        let (st, r) = search(
            &s,
            json!({"query": {"text": "cat face"}, "target": "image", "k": 6}),
        );
        assert_eq!(st, 200, "{r}");
        let (st, e) = search(
            &s,
            json!({"query": {"text": "cat"}, "target": "image", "rerank": {"top": 4}}),
        );
        assert_eq!(st, 422, "{e}");
        assert!(e.to_string().contains("--rerank-model"), "{e}");
        r
    };
    let s = Server::start(
        &data,
        &[
            "--model".into(),
            emoji_model().display().to_string(),
            "--rerank-model".into(),
            model.display().to_string(),
        ],
    );

    // Without `rerank`, nothing changes.
    let (st, same) = search(
        &s,
        json!({"query": {"text": "cat face"}, "target": "image", "k": 6}),
    );
    assert_eq!(st, 200, "{same}");
    assert_eq!(same["hits"], plain["hits"]);
    assert!(same.get("rerank").is_none());

    // With it: the same six candidates, re-scored, best first; k = 3 of them returned.
    let (st, r) = search(
        &s,
        json!({"query": {"text": "cat face"}, "target": "image", "k": 3, "rerank": {"top": 6}}),
    );
    assert_eq!(st, 200, "{r}");
    let candidates = hit_ids(&plain);
    let reranked = hits(&r);
    assert_eq!(reranked.len(), 3);
    for h in reranked {
        assert!(
            candidates.contains(&h["id"].as_str().unwrap().to_string()),
            "{h}"
        );
        assert_eq!(h["stage"], "rerank", "{h}");
        assert!(h["first_stage_score"].is_number(), "{h}");
    }
    assert_eq!(r["rerank"]["scored"], 6, "{r}");
    assert_eq!(r["rerank"]["unscored"], 0, "{r}");
    assert!(r["rerank"]["took_ms"].as_f64().unwrap() > 0.0);
    let scores = hit_numbers(&r, "score");
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    // The served scores are the re-ranker's, and batching does not change them.
    let reranker = Reranker::load(&model, &lexlip_model::Device::Cpu).unwrap();
    let processor = reranker.towers().image_encoder();
    let images: Vec<_> = candidates
        .iter()
        .map(|id| {
            processor
                .preprocess(&std::fs::read(emoji_png(id)).unwrap())
                .unwrap()
        })
        .collect();
    let together = reranker.score_text_images("cat face", &images).unwrap();
    for (k, image) in images.iter().enumerate() {
        let alone = reranker
            .score_text_images("cat face", std::slice::from_ref(image))
            .unwrap();
        assert!(
            (alone[0] - together[k]).abs() < 1e-5,
            "{k}: {alone:?} vs {together:?}"
        );
    }
    // The server re-scores thumbnails (JPEGs of the PNGs): its scores are close to these.
    for h in reranked {
        let k = candidates
            .iter()
            .position(|c| c == h["id"].as_str().unwrap())
            .unwrap();
        assert!(
            (h["score"].as_f64().unwrap() - f64::from(together[k])).abs() < 0.05,
            "{h}"
        );
    }

    // Image → text: text candidates are re-scored the same way.
    let (st, r) = s.call(
        "POST",
        "/v1/search/image-to-text",
        Some(&json!({
            "collection": "emoji",
            "image": lexlip_tests::b64(&emoji_png("1f436")),
            "k": 4,
            "rerank": {"top": 8}
        })),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["rerank"]["scored"], 8, "{r}");
    assert!(hits(&r).iter().all(|h| h["stage"] == "rerank"));

    // Bad options: clear 422s, nothing searched.
    for (body, needle) in [
        (
            json!({"query": {"text": "cat"}, "rerank": {"top": 0}}),
            "rerank.top",
        ),
        (
            json!({"query": {"text": "cat"}, "rerank": {"top": 257}}),
            "rerank.top",
        ),
        (
            json!({"query": {"sparse": {"cat": 1.0}}, "rerank": {"top": 4}}),
            "text or image query",
        ),
    ] {
        let (st, e) = search(&s, body);
        assert_eq!(st, 422, "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    drop(s);

    // lexlip eval measures the second stage next to the first.
    let report = lexlip_json(&line(
        "eval --max-length 24 --rerank-top 8 --json",
        &[
            ("--tsv", &tsv),
            ("--model", &emoji_model()),
            ("--rerank-model", &model),
        ],
    ));
    let full = &report["settings"][0];
    assert_eq!(full["rerank.top"], 8, "{full}");
    for key in [
        "rerank.t2i.r@10",
        "rerank.i2t.r@1",
        "rerank.t2i.ms_per_query",
    ] {
        assert!(full[key].is_number(), "{key} in {full}");
    }
    // Re-ranking the first 8 of 12 cannot lose what the first stage found in its first 8 at
    // R@10 (10 ≥ 8).
    assert!(full["rerank.t2i.r@10"].as_f64().unwrap() >= full["t2i.r@5"].as_f64().unwrap());

    // A lexicon model is not a re-ranker.
    let out = lexlip(&line(
        "eval",
        &[
            ("--tsv", &tsv),
            ("--model", &emoji_model()),
            ("--rerank-model", &emoji_model()),
        ],
    ));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rerank.json"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
