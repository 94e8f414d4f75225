//! `--freeze-text`: the text tower stays what it was initialised to, only the image side
//! learns, and the caption cache that replaces the text forward equals computing it per batch.

mod common;

use candle_core::{DType, Device};
use lexlip_train::augment::Augment;
use lexlip_train::data::{self, Masking};
use lexlip_train::model::LexLipModel;
use lexlip_train::text::TextTokenizer;
use lexlip_train::text_cache::TextCache;

use common::{corpus, err_of, fast_options, mean, run_collecting};

fn frozen_options(tsv: &std::path::Path, out: &std::path::Path) -> lexlip_train::TrainOptions {
    let mut o = fast_options(tsv, out);
    o.model.tokenizer = None;
    o.model.text_init = Some(common::splade_dir());
    o.model.image_head_init = lexlip_train::HeadInit::Random;
    o.method.freeze_text = true;
    o.method.tau = 0.5;
    o
}

#[test]
fn a_frozen_text_tower_keeps_its_weights_while_the_image_side_learns() {
    let (tmp, tsv) = corpus();
    let out = tmp.path().join("model");
    let mut o = frozen_options(&tsv, &out);
    o.optim.steps = Some(30);
    o.optim.warmup = 0.05;
    let (s, seen) = run_collecting(&o);
    assert_eq!(s.steps_done, 30);
    let baco: Vec<f64> = seen.logs.iter().map(|l| l.parts["baco"]).collect();
    let (first, last) = (mean(&baco[..5]), mean(&baco[25..]));
    assert!(last < 0.8 * first, "BaCo {first:.3} → {last:.3}: {baco:?}");
    for l in &seen.logs {
        assert!(!l.parts.contains_key("self_mlm") && !l.parts.contains_key("lex_mlm_t2i"));
        assert!(l.parts["lex_mlm_i2t"].is_finite());
    }
    assert!(
        seen.messages
            .iter()
            .any(|m| m.contains("encoding the 32 captions"))
    );
    // Every encoder weight of the saved text tower is the initial model's, bit for bit.
    let dev = Device::Cpu;
    let saved = candle_core::safetensors::load(out.join("text/model.safetensors"), &dev).unwrap();
    let init = candle_core::safetensors::load(common::splade_dir().join("model.safetensors"), &dev)
        .unwrap();
    let mut compared = 0;
    for (name, t) in &saved {
        if let Some(orig) = init.get(name) {
            let a = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let b = orig.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
            assert_eq!(a, b.to_vec1::<f32>().unwrap(), "{name} changed");
            compared += 1;
        }
    }
    assert!(compared > 20, "only {compared} text tensors compared");
}

#[test]
fn frozen_text_needs_a_trained_text_tower_and_no_text_lr() {
    let (tmp, tsv) = corpus();
    let mut o = fast_options(&tsv, &tmp.path().join("a"));
    o.method.freeze_text = true;
    let e = err_of(&o);
    assert!(e.contains("--text-init"), "{e}");
    let mut o = frozen_options(&tsv, &tmp.path().join("b"));
    o.optim.text_lr = Some(1e-5);
    let e = err_of(&o);
    assert!(e.contains("--text-lr"), "{e}");
}

/// The cache (captions encoded in chunks of the corpus order) gives the lexicon the text
/// tower computes on the batch itself.
#[test]
fn the_caption_cache_equals_the_text_tower_on_each_batch() {
    let (tmp, tsv) = corpus();
    let o = frozen_options(&tsv, &tmp.path().join("model"));
    let init = lexlip_train::init::resolve(&o, &tmp.path().join("scratch")).unwrap();
    let tokenizer = TextTokenizer::load(&init.tokenizer, o.data.max_length).unwrap();
    let input = lexlip_corpus::Input::Tsv {
        path: tsv.clone(),
        images_root: None,
    };
    let corpus = data::load(&input, &tokenizer, &mut |_, _| {}).unwrap();
    let dev = Device::Cpu;
    let mut model = LexLipModel::build(&init, 2, None, 7, DType::F32, &dev).unwrap();
    model.frozen_text = true;
    let mut steps = Vec::new();
    let cache = TextCache::build(&model, &corpus, tokenizer.pad, &mut |d, t| {
        steps.push((d, t))
    })
    .unwrap();
    assert_eq!(steps.first(), Some(&(0, 32)));
    assert_eq!(steps.last(), Some(&(32, 32)));
    let augment = Augment::none(&lexlip_model::ImageProcessor {
        size: model.image.image_size(),
        mean: init.image.mean,
        std: init.image.std,
        squash: false,
        resampler: Default::default(),
    });
    let masking = Masking {
        rate: 0.3,
        decoder_rate: 0.5,
        second_view: false,
        patches: None,
    };
    let mut order = data::Order::new(3, corpus.pairs.len(), 8);
    for step in 0..4 {
        let indices = order.batch(step);
        let host =
            data::make_batch(&corpus, &indices, step, 3, &augment, &tokenizer, masking).unwrap();
        let mut batch = host.to_device(&dev).unwrap();
        let direct = model
            .frozen_text_lexicon(&batch, &lexlip_train::nn::Dropout::off())
            .unwrap();
        batch.text_lexicon = Some(cache.batch(&host.pairs, &dev).unwrap());
        let cached = model
            .frozen_text_lexicon(&batch, &lexlip_train::nn::Dropout::off())
            .unwrap();
        let a = direct.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = cached.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(a.iter().any(|&w| w > 0.0));
        assert!(common::max_abs_diff(&a, &b) < 1e-5, "step {step}");
    }
}
