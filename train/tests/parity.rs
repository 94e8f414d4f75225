//! The training towers compute what the inference encoders compute on the same weights, and the
//! reshape+matmul patch embedding equals the stride-p convolution.

mod common;

use candle_core::{DType, Device};
use candle_nn::VarMap;
use lexlip_model::config::{read_json, with_defaults};
use lexlip_model::{ImageEncoder, TextEncoder, Weights};
use lexlip_train::beit::BeitMlm;
use lexlip_train::bert::{BertConfig, BertMlm};
use lexlip_train::nn::Dropout;
use lexlip_train::params::{ParamBuilder, Source};

use common::{
    assert_text_logits_close, max_abs_diff, model_fixtures, pixels_of, random_images, splade_dir,
};

const TOL: f32 = 1e-4;

#[test]
fn text_tower_equals_text_encoder() {
    let dir = splade_dir();
    let dev = Device::Cpu;
    let enc = TextEncoder::load(&dir, &dev).unwrap();
    let cfg_path = dir.join("config.json");
    let cfg = BertConfig::read(&cfg_path, &read_json(&cfg_path).unwrap()).unwrap();
    let weights = Weights::from_safetensors_dir(&dir).unwrap();
    let store = VarMap::new();
    let tower = BertMlm::new(
        &ParamBuilder::new(&store, Source::Weights(&weights), DType::F32, &dev),
        &cfg,
        false,
    )
    .unwrap();
    let texts = [
        "a brown dog runs on the grass",
        "smiling face with heart-eyes",
        "red apple",
    ];
    let (got, want) = assert_text_logits_close(&enc, &texts, TOL, &|ids, mask| {
        tower.logits(ids, mask, &Dropout::off()).unwrap()
    });
    assert_eq!(got.dims(), want.dims());
    // Every parameter of the file the model uses is a variable under its own name.
    let names: Vec<String> = store.data().lock().unwrap().keys().cloned().collect();
    assert!(names.contains(&"bert.encoder.layer.1.output.LayerNorm.weight".to_string()));
    assert!(names.contains(&"cls.predictions.bias".to_string()));
    assert!(
        !names.contains(&"cls.predictions.decoder.weight".to_string()),
        "tied"
    );
}

fn beit_tower(dir: &std::path::Path, dev: &Device) -> (BeitMlm, VarMap) {
    let cfg_path = dir.join("config.json");
    let raw = read_json(&cfg_path).unwrap();
    let cfg: lexlip_model::beit::Config =
        with_defaults(&cfg_path, &raw, serde_json::json!({})).unwrap();
    let mut weights = Weights::from_safetensors_dir(dir).unwrap();
    weights.alias("cls.predictions.bias", "cls.predictions.decoder.bias");
    let vocab = weights.shape("cls.predictions.bias").unwrap()[0];
    let store = VarMap::new();
    let pb = ParamBuilder::new(&store, Source::Weights(&weights), DType::F32, dev);
    let tower = BeitMlm::new(
        &pb,
        &pb.pp("cls"),
        &cfg,
        &lexlip_model::image::HeadConfig::default(),
        vocab,
    )
    .unwrap();
    (tower, store)
}

#[test]
fn image_tower_equals_image_encoder() {
    let dir = model_fixtures().join("beit-tiny");
    let dev = Device::Cpu;
    let enc = ImageEncoder::load_with_dtype(&dir, &dev, DType::F32).unwrap();
    let (tower, _) = beit_tower(&dir, &dev);
    let size = enc.image_size();
    let images = random_images(3, size, 1);
    let want = enc.logits(&images).unwrap();
    let got = tower
        .logits(&pixels_of(&images, size, &dev), &Dropout::off())
        .unwrap();
    assert_eq!(got.dims(), want.dims());
    let d = max_abs_diff(
        &got.flatten_all().unwrap().to_vec1().unwrap(),
        &want.flatten_all().unwrap().to_vec1().unwrap(),
    );
    assert!(d < TOL, "max abs diff {d}");
}

#[test]
fn patch_embedding_is_the_convolution() {
    let dir = model_fixtures().join("beit-tiny");
    let dev = Device::Cpu;
    let (tower, store) = beit_tower(&dir, &dev);
    let size = tower.image_size();
    let images = random_images(2, size, 2);
    let pixels = pixels_of(&images, size, &dev);
    let got = tower.patch_embed(&pixels).unwrap();
    let vars = store.data().lock().unwrap();
    let w = vars["beit.embeddings.patch_embeddings.projection.weight"]
        .as_tensor()
        .clone();
    let b = vars["beit.embeddings.patch_embeddings.projection.bias"]
        .as_tensor()
        .clone();
    let p = w.dim(2).unwrap();
    let conv = pixels
        .conv2d(&w, 0, p, 1, 1)
        .unwrap()
        .broadcast_add(&b.reshape((1, (), 1, 1)).unwrap())
        .unwrap();
    let (n, h, g, _) = conv.dims4().unwrap();
    let want = conv
        .reshape((n, h, g * g))
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let d = max_abs_diff(
        &got.flatten_all().unwrap().to_vec1().unwrap(),
        &want
            .contiguous()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap(),
    );
    assert!(d < 1e-5, "max abs diff {d}");
}
