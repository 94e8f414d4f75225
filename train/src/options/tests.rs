use super::*;

/// Default options naming a corpus, which validate: the base each single-option check changes.
fn with_corpus() -> TrainOptions {
    let mut o = TrainOptions::new("out");
    o.data.tsv = Some("pairs.tsv".into());
    o
}

/// `validate` refuses `o` with a message that names `flag`.
fn assert_refused(o: &TrainOptions, flag: &str) {
    let e = o.validate().unwrap_err().to_string();
    assert!(e.contains(flag), "{e}");
}

/// LexLIP runs hash without the dense options (their checkpoints from before the dense
/// objective still resume); dense runs hash with them.
#[test]
fn fingerprint_keys_per_objective() {
    let lexlip = TrainOptions::new("out").fingerprint_json();
    assert!(lexlip.get("objective").is_none() && lexlip.get("dense_dim").is_none());
    assert_eq!(lexlip["tau"], 0.05);
    let mut o = TrainOptions::new("out");
    o.method.objective = Objective::Dense;
    let dense = o.fingerprint_json();
    assert_eq!(dense["objective"], "dense");
    assert_eq!(dense["dense_dim"], 256);
    o.method.dense_dim = 64;
    assert_ne!(o.fingerprint_json(), dense);
    // The sampler and the consistency weight hash only when set.
    assert!(lexlip.get("sampler").is_none() && lexlip.get("itc_consistency").is_none());
    let mut g = TrainOptions::new("out");
    g.optim.sampler = Sampler::Grouped;
    g.method.itc_consistency = 0.2;
    let grouped = g.fingerprint_json();
    assert_eq!(grouped["sampler"], "grouped");
    assert_eq!(grouped["group_size"], 1024);
    assert_eq!(grouped["itc_consistency"], 0.2);
    // The heads' options hash for heads runs only; where the cache lives never does.
    assert!(lexlip.get("teacher_tau").is_none() && lexlip.get("backbone").is_none());
    let mut h = TrainOptions::new("out");
    h.method.objective = Objective::Heads;
    h.model.backbone = Some("dense".into());
    h.model.cache = Some("somewhere".into());
    h.lexicon.text_top_k = 16;
    let heads = h.fingerprint_json();
    assert_eq!(heads["backbone"], "dense");
    assert_eq!(heads["text_top_k"], 16);
    assert_eq!(heads["image_top_k"], 64);
    assert!(heads.get("cache").is_none());
    h.model.cache = Some("elsewhere".into());
    assert_eq!(h.fingerprint_json(), heads);
}

/// The options serialize flat, as before they were grouped: `train.json` files and resume
/// fingerprints of earlier runs stay valid. The fixture is the `options` object of a run made
/// before the grouping (`lexlip train` of the lexicon recipe).
#[test]
fn options_serialize_as_before_the_groups() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/train-options-before-groups.json"
    );
    let before: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let options: TrainOptions = serde_json::from_value(before.clone()).unwrap();
    assert_eq!(serde_json::to_value(&options).unwrap(), before);
    assert_eq!(options.optim.batch_size, 256);
    assert_eq!(options.lexicon.image_top_k, 64);
    let keys = serde_json::to_value(TrainOptions::new("out")).unwrap();
    for group in ["data", "model", "method", "lexicon", "optim", "run"] {
        assert!(keys.get(group).is_none(), "{group} must not nest");
    }
}

/// The caption-word likelihood is the heads' (on by default there, off and refused for the
/// towers), its weight and temperature are checked, and runs without it hash as before it
/// existed (their checkpoints resume).
#[test]
fn caption_words_belong_to_the_heads() {
    let mut h = with_corpus();
    h.method.objective = Objective::Heads;
    h.model.backbone = Some("dense".into());
    h.apply_objective_defaults(|_| false);
    assert_eq!(
        (h.lexicon.caption_words, h.lexicon.caption_words_text),
        (1.0, 0.3)
    );
    h.validate().unwrap();
    assert_eq!(h.fingerprint_json()["caption_words"], 1.0);
    let mut off = h.clone();
    off.lexicon.caption_words = 0.0;
    off.lexicon.caption_words_text = 0.0;
    let before = off.fingerprint_json();
    for key in ["caption_words", "caption_words_text", "caption_words_tau"] {
        assert!(before.get(key).is_none(), "{key}");
    }
    for (weight, text, tau) in [
        (-1.0, 0.0, 0.3),
        (f64::NAN, 0.0, 0.3),
        (1.0, -0.5, 0.3),
        (1.0, 0.0, 0.0),
        (1.0, 0.0, f64::INFINITY),
    ] {
        let mut bad = h.clone();
        bad.lexicon.caption_words = weight;
        bad.lexicon.caption_words_text = text;
        bad.lexicon.caption_words_tau = tau;
        assert_refused(&bad, "--caption-words");
    }
    let mut towers = with_corpus();
    assert_eq!(towers.lexicon.caption_words, 0.0);
    towers.validate().unwrap();
    for (image, text) in [(1.0, 0.0), (0.0, 1.0)] {
        towers.lexicon.caption_words = image;
        towers.lexicon.caption_words_text = text;
        assert_refused(&towers, "--objective heads");
    }
}

/// The own-word floor is the heads' text side: a share in (0, 1], refused for the towers, and
/// absent from the options when not given (runs from before it hash as they did).
#[test]
fn the_own_floor_is_a_share_for_the_heads() {
    let mut h = with_corpus();
    h.method.objective = Objective::Heads;
    h.model.backbone = Some("dense".into());
    h.apply_objective_defaults(|_| false);
    assert!(h.fingerprint_json().get("own_floor").is_none());
    h.lexicon.own_floor = Some(0.5);
    h.validate().unwrap();
    assert_eq!(h.fingerprint_json()["own_floor"], 0.5);
    for share in [0.0, -0.1, 1.5, f64::NAN] {
        let mut bad = h.clone();
        bad.lexicon.own_floor = Some(share);
        assert_refused(&bad, "--own-floor");
    }
    let mut towers = with_corpus();
    towers.lexicon.own_floor = Some(0.5);
    assert_refused(&towers, "--objective heads");
}

/// The flat-style augmentation is off by default and then absent from the options (runs from
/// before it hash as they did and resume); when on it hashes, and a probability outside [0, 1]
/// is refused.
#[test]
fn style_augment_hashes_only_when_on() {
    let mut o = with_corpus();
    o.validate().unwrap();
    let off = o.fingerprint_json();
    assert!(off.get("style_augment").is_none());
    o.data.style_augment = 0.5;
    o.validate().unwrap();
    assert_eq!(o.fingerprint_json()["style_augment"], 0.5);
    for bad in [-0.1, 1.5, f64::NAN] {
        o.data.style_augment = bad;
        assert_refused(&o, "--style-augment");
    }
}

/// Rotation and hue jitter are off by default and then absent from the options (earlier runs
/// hash as they did); on, they hash, and values out of range are refused.
#[test]
fn rotation_and_hue_hash_only_when_on() {
    let mut o = with_corpus();
    let off = o.fingerprint_json();
    assert!(off.get("rotate").is_none() && off.get("hue_jitter").is_none());
    (o.data.rotate, o.data.hue_jitter) = (20.0, 0.1);
    o.validate().unwrap();
    assert_eq!(o.fingerprint_json()["rotate"], 20.0);
    assert_eq!(o.fingerprint_json()["hue_jitter"], 0.1);
    for bad in [-1.0, 181.0, f64::NAN] {
        o.data.rotate = bad;
        assert_refused(&o, "--rotate");
    }
    o.data.rotate = 0.0;
    for bad in [-0.1, 0.6, f64::NAN] {
        o.data.hue_jitter = bad;
        assert_refused(&o, "--hue-jitter");
    }
}

/// The grounding targets' document-frequency cap is absent from the options at its default
/// (earlier runs hash as they did); set, it hashes for the lexicon objectives, and shares
/// outside (0, 1] are refused.
#[test]
fn grounding_max_df_hashes_only_when_set() {
    let mut o = with_corpus();
    assert!(o.fingerprint_json().get("grounding_max_df").is_none());
    o.lexicon.grounding_max_df = 0.15;
    o.validate().unwrap();
    assert_eq!(o.fingerprint_json()["grounding_max_df"], 0.15);
    for bad in [0.0, -0.1, 1.5, f64::NAN] {
        o.lexicon.grounding_max_df = bad;
        assert_refused(&o, "--grounding-max-df");
    }
}

/// The words kept above the cap hash only when given; an empty one is refused.
#[test]
fn grounding_words_hash_only_when_given() {
    let mut o = with_corpus();
    assert!(o.fingerprint_json().get("grounding_words").is_none());
    o.lexicon.grounding_words = vec!["man".into(), "flag".into()];
    o.validate().unwrap();
    assert_eq!(
        o.fingerprint_json()["grounding_words"],
        serde_json::json!(["man", "flag"])
    );
    o.lexicon.grounding_words = vec!["man".into(), " ".into()];
    assert_refused(&o, "--grounding-words");
}
