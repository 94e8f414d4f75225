//! Whole runs on a tiny synthetic corpus (generated PNGs + captions): the loss goes down, the
//! output directory loads with lexlip-model and encodes, resume gives the same weights bit for
//! bit, and bad inputs get clear errors.

mod common;

use lexlip_model::{Encoders, LoadOptions};

use common::{
    copy_without, corpus, err_of, fast_options, forty_steps_lower_the_loss, model_bytes,
    resume_options, run_for, run_quietly, synthetic_tsv, train_json, train_stopped_and_resumed,
};

#[test]
fn a_few_steps_lower_the_loss_and_the_model_loads() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("model");
    let mut o = fast_options(&tsv, &out);
    let seen = forty_steps_lower_the_loss(&mut o);
    for l in &seen.logs {
        for k in [
            "self_mlm",
            "lex_mlm_i2t",
            "lex_mlm_t2i",
            "baco",
            "flops_image",
            "grounding",
        ] {
            assert!(l.parts[k].is_finite(), "{k} missing or not finite");
        }
    }
    // The output is a LexLIP directory lexlip-model loads unchanged, and it encodes.
    let enc =
        Encoders::load_with(&out, &candle_core::Device::Cpu, &LoadOptions::default()).unwrap();
    let text = enc.text().unwrap().encode(&["a red square"]).unwrap();
    assert!(!text[0].is_empty());
    let img = common::shape_png([220, 30, 30], "square", 24);
    let image = enc.image().unwrap();
    assert_eq!(image.image_size(), 16);
    let v = image.encode(&[image.preprocess(&img).unwrap()]).unwrap();
    assert!(!v[0].is_empty());
    assert_eq!(enc.term_space().unwrap().size, 1000);
    // Top-K pooling (on by default): the model records its K and its encoder applies it.
    let settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("lexlip.json")).unwrap()).unwrap();
    assert_eq!(settings["image_top_k"], 64);
    assert_eq!(image.top_k(), Some(64));
    assert!(v[0].len() <= 64, "{} terms", v[0].len());
    // A model's weak-match calibration is read from its lexlip.json.
    assert_eq!(enc.weak_match(), lexlip_model::WeakMatch::default());
    let mut calibrated = settings.clone();
    calibrated["weak_match"] = serde_json::json!({"text": 0.04});
    std::fs::write(out.join("lexlip.json"), calibrated.to_string()).unwrap();
    let enc =
        Encoders::load_with(&out, &candle_core::Device::Cpu, &LoadOptions::default()).unwrap();
    assert_eq!(enc.weak_match().text, Some(0.04));
    assert_eq!(enc.weak_match().image, None);
    std::fs::write(out.join("lexlip.json"), settings.to_string()).unwrap();
    let meta = train_json(&out);
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["data"]["pairs"], 32);
    assert_eq!(
        meta["data"]["files"][0]["sha256"].as_str().unwrap().len(),
        64
    );
    // A finished run does nothing when started again.
    let again = run_quietly(&o);
    assert!(again.already_complete);
}

/// N steps in one go and k steps, stop, resume to N give bitwise the same model (phase 1 and
/// phase 2, with dropout and augmentation on).
#[test]
fn resume_gives_bitwise_the_same_weights() {
    let (tmp, tsv) = corpus();
    let base = |out: &std::path::Path| resume_options(&tsv, out);
    let whole = tmp.path().join("whole");
    run_quietly(&base(&whole));
    let parts = tmp.path().join("parts");
    train_stopped_and_resumed(&base(&parts), 3, "lexlip.json");
    assert_eq!(model_bytes(&whole), model_bytes(&parts));

    // Phase 2 from the phase-1 model: momentum encoders and queues resume too.
    let p2 = |out: &std::path::Path| {
        let mut o = base(out);
        o.method.phase = 2;
        o.model.init = Some(whole.clone());
        o.model.tokenizer = None;
        o.model.image_size = None;
        o.model.patch_size = None;
        o.method.queue_size = 16;
        o
    };
    let whole2 = tmp.path().join("whole2");
    let s = run_quietly(&p2(&whole2));
    assert!(s.last.as_ref().unwrap().parts.contains_key("moco"));
    let parts2 = tmp.path().join("parts2");
    train_stopped_and_resumed(&p2(&parts2), 4, "lexlip.json");
    assert_eq!(model_bytes(&whole2), model_bytes(&parts2));
    // And a resumed run with other options is refused.
    let mut other = p2(&parts2);
    other.optim.lr = 5e-4;
    other.run.restart = false;
    std::fs::remove_file(parts2.join("lexlip.json")).unwrap();
    let err = err_of(&other);
    assert!(err.contains("--restart"), "{err}");
}

#[test]
fn bad_items_are_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("broken.png"), b"not a png").unwrap();
    let tsv = synthetic_tsv(
        &data,
        &[
            "a lost image\timg/missing.png\tmissing",
            "a broken image\tbroken.png\tbroken",
            "   \timg/red-square.png\tred-square",
            "only two\tfields",
        ],
    );
    let s = run_for(fast_options(&tsv, &tmp.path().join("out")), 1);
    assert_eq!(s.pairs, 32);
    assert_eq!(s.skipped["missing_file"], 1);
    assert_eq!(s.skipped["corrupt_image"], 1);
    assert_eq!(s.skipped["empty_caption"], 1);
    assert_eq!(s.skipped["bad_line"], 1);
    assert_eq!(s.skipped["no_image"], 2, "{:?}", s.skipped);
}

#[test]
fn bad_inputs_get_clear_errors() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("out");

    // (A corpus smaller than a batch trains with batches of the corpus:
    // `heads::a_batch_larger_than_the_corpus_fits_it`.)

    // An output directory that cannot be written (its parent is a file).
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = fast_options(&tsv, &file.join("out"));
    assert!(err_of(&o).contains("a-file"), "{}", err_of(&o));
    let o = fast_options(&tsv, &file);
    assert!(err_of(&o).contains("not a directory"), "{}", err_of(&o));

    // A text model without an MLM head cannot be trained.
    let no_head = tmp.path().join("bert-no-head");
    let files = ["config.json", "tokenizer.json"];
    copy_without(&common::splade_dir(), &no_head, &files, "cls.");
    let mut o = fast_options(&tsv, &out);
    o.model.text_init = Some(no_head.clone());
    o.model.tokenizer = None;
    let e = err_of(&o);
    assert!(
        e.contains("cannot be trained") && e.contains("cls.predictions"),
        "{e}"
    );

    // A BEiT without a vocabulary head needs --image-head-init.
    let mut o = fast_options(&tsv, &out);
    let beit = tmp.path().join("beit-no-head");
    let files = ["config.json", "tokenizer.json", "preprocessor_config.json"];
    copy_without(
        &common::model_fixtures().join("beit-tiny"),
        &beit,
        &files,
        "cls.",
    );
    o.model.image_init = Some(beit);
    o.model.image_size = None;
    o.model.patch_size = None;
    let e = err_of(&o);
    assert!(e.contains("--image-head-init"), "{e}");

    // Options out of range, and no corpus.
    let mut o = fast_options(&tsv, &out);
    o.method.mask_rate = 0.0;
    assert!(err_of(&o).contains("--mask-rate"));
    let mut o = fast_options(&tsv, &out);
    o.data.tsv = None;
    assert!(err_of(&o).contains("exactly one corpus"));
    let mut o = fast_options(&tsv, &out);
    o.method.phase = 2;
    o.method.queue_size = 12;
    assert!(err_of(&o).contains("multiple of --batch-size"));
    // Nothing was written by the failed runs.
    assert!(!out.join("lexlip.json").exists());
}

/// Initialised from the real tiny SPLADE model (text; the image head copied from its head),
/// saved in f16: with a negligible learning rate the saved text tower still ranks terms like the
/// original.
#[test]
fn init_from_splade_and_save_f16() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("out");
    let mut o = fast_options(&tsv, &out);
    o.model.tokenizer = None;
    o.model.text_init = Some(common::splade_dir());
    o.optim.steps = Some(2);
    o.optim.lr = 1e-7;
    o.run.save_dtype = lexlip_train::SaveDtype::F16;
    let s = run_quietly(&o);
    assert_eq!(s.steps_done, 2);
    let meta = train_json(&out);
    assert_eq!(meta["init"]["image_head"], "text");
    let st = candle_core::safetensors::load(
        out.join("text/model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    assert!(st.values().all(|t| t.dtype() == candle_core::DType::F16));
    let enc = Encoders::load(&out, &candle_core::Device::Cpu).unwrap();
    assert_eq!(enc.term_space().unwrap().size, 30522);
    let text = "a red square on a white background";
    let got = enc.text().unwrap().encode(&[text]).unwrap().remove(0);
    let orig = Encoders::load(&common::splade_dir(), &candle_core::Device::Cpu).unwrap();
    let want = orig.text().unwrap().encode(&[text]).unwrap().remove(0);
    let top = |v: &lexlip_proto::SparseVector| -> Vec<String> {
        v.by_weight()
            .into_iter()
            .take(5)
            .map(|(t, _)| t.to_string())
            .collect()
    };
    assert!(want.len() > 3);
    assert_eq!(top(&got), top(&want));
}

/// The re-ranker runs on the same training loop: N steps in one go and k steps, stop, resume
/// give bitwise the same fusion weights, and a stop flag (Ctrl-C) leaves a checkpoint of the
/// step it stopped after.
#[test]
fn rerank_resumes_bitwise_and_checkpoints_on_stop() {
    let (tmp, tsv) = corpus();
    let lexicon = tmp.path().join("lexicon");
    run_for(fast_options(&tsv, &lexicon), 2);
    let rerank = |out: &std::path::Path| {
        let mut o = fast_options(&tsv, out);
        o.method.objective = lexlip_train::Objective::Rerank;
        o.model.init = Some(lexicon.clone());
        o.model.tokenizer = None;
        o.model.image_size = None;
        o.model.patch_size = None;
        o.optim.steps = Some(4);
        o.run.checkpoint_every = 2;
        o.method.fusion_layers = 1;
        o.method.rerank_negatives = 4;
        o
    };
    let fusion =
        |dir: &std::path::Path| std::fs::read(dir.join("fusion/model.safetensors")).unwrap();
    let whole = tmp.path().join("whole");
    let s = run_quietly(&rerank(&whole));
    assert_eq!(s.steps_done, 4);
    assert!(s.last.as_ref().unwrap().parts.contains_key("itm_accuracy"));
    let parts = tmp.path().join("parts");
    train_stopped_and_resumed(&rerank(&parts), 1, "rerank.json");
    assert_eq!(fusion(&whole), fusion(&parts));

    let stopped = tmp.path().join("stopped");
    let control = lexlip_train::RunControl {
        stop: Some(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            true,
        ))),
        ..Default::default()
    };
    let s =
        lexlip_train::train(&rerank(&stopped), &control, &mut common::Collect::default()).unwrap();
    assert!(s.interrupted);
    assert_eq!(s.steps_done, 1);
    assert!(
        stopped
            .join("checkpoints/step-00000001/state.json")
            .is_file()
    );
}

/// The same 16 pictures and captions as one WebDataset shard and as a TSV (one caption per
/// picture, same order): training reads the shard's images in place, and gives the TSV's weights
/// byte for byte; stopped mid-epoch and resumed, the same again.
#[test]
fn a_webdataset_trains_as_its_tsv_and_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let full = synthetic_tsv(&data, &[]);
    // Keep the first caption of each picture.
    let text = std::fs::read_to_string(&full).unwrap();
    let mut lines = text.lines();
    let mut tsv = format!("{}\n", lines.next().unwrap());
    let mut shard = tar::Builder::new(std::fs::File::create(data.join("00000.tar")).unwrap());
    let mut add = |name: &str, bytes: &[u8]| {
        lexlip_corpus::sources::webdataset::append_member(&mut shard, name, bytes).unwrap();
    };
    for line in lines.step_by(2) {
        tsv.push_str(line);
        tsv.push('\n');
        let [caption, rel, id] = line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("{line}")
        };
        add(
            &format!("{id}.png"),
            &std::fs::read(data.join(rel)).unwrap(),
        );
        add(&format!("{id}.txt"), caption.as_bytes());
    }
    shard.finish().unwrap();
    drop(shard);
    let one_caption = data.join("one-caption.tsv");
    std::fs::write(&one_caption, tsv).unwrap();

    let from_tsv = tmp.path().join("tsv");
    run_quietly(&fast_options(&one_caption, &from_tsv));
    let wds = |out: &std::path::Path| {
        let mut o = fast_options(&one_caption, out);
        o.data.tsv = None;
        o.data.webdataset = vec![data.join("00000.tar")];
        o
    };
    let from_shard = tmp.path().join("wds");
    run_quietly(&wds(&from_shard));
    assert_eq!(model_bytes(&from_tsv), model_bytes(&from_shard));
    // 6 steps of 8 pairs over 16 (two steps an epoch), stopped after step 3 and resumed.
    let parts = tmp.path().join("wds-parts");
    train_stopped_and_resumed(&wds(&parts), 3, "lexlip.json");
    assert_eq!(model_bytes(&from_shard), model_bytes(&parts));
}
