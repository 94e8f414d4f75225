//! The projection of a fused dense model (`lexlip train --objective adapter --backbone TEACHER
//! --image-backbone DIR`; [`lexlip_model::fused`]): LiT's locked image tower beside a dense
//! teacher. The teacher and the pretrained tower stay frozen; every training image's inputs
//! (the teacher's unit-length image embedding and the tower's pooled features) and every
//! caption's teacher embedding are computed once into embedding caches, then an MLP learns to
//! project the images' inputs onto their captions' embeddings:
//! ```text
//! v = unit(fc2(gelu(fc1((x − μ) / σ))))     x: [teacher image embedding, tower features]
//! loss = InfoNCE(v · t / τ)                  t: the caption's teacher embedding (fixed)
//! ```
//! where μ and σ are the training images' mean and deviation per input, and a batch's other
//! captions of the same picture are no negatives. With `--image-views N`, N augmented views of
//! every picture are cached too, and each view is paired with the picture's captions. The
//! teacher's texts do not move, so heads trained over the teacher's vocabulary meet the same
//! text space (`--objective heads --backbone` on the written model).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use lexlip_model::fused::{Adapter, FusedConfig, ImageInputs, MODEL_TYPE, column_stats};
use lexlip_model::mobilenet_v2::MobileNetV2;
use lexlip_model::{DenseEncoder, DualEncoder, PreprocessedImage, Weights};

use crate::cache::rows::{
    IMAGES, PairRows, TEXTS, cache_dir, cached_corpus, image_section, text_rows, text_section,
};
use crate::cache::views::{Drawn, PairInputs, ViewSpec, drawn};
use crate::cache::{CacheMeta, EmbeddingCache};
use crate::data::Order;
use crate::error::{Result, TrainError};
use crate::export::{copy_file, copy_files, copy_part, save_part, write_json};
use crate::grouping::Grouping;
use crate::losses::{in_batch_masked, symmetric};
use crate::nn::l2_normalize;
use crate::observe::{Observer, RunControl, Summary};
use crate::optim::Param;
use crate::options::TrainOptions;
use crate::params::{ParamBuilder, Source, snapshot};
use crate::steps::{Batches, Computed, Losses, Trained};
use crate::text::TextTokenizer;
use lexlip_model::nn::Init;

/// The projection's hidden width (the probe's, `scripts/probe_image_backbone.py`).
pub const HIDDEN: usize = 1024;
/// The side the image tower reads by default, in pixels (MobileNetV2's ImageNet resolution;
/// `--image-backbone-size` changes it).
pub const BACKBONE_SIZE: usize = 224;
/// Pictures per pass through both towers (MobileNetV2 at 224 pixels).
const IMAGE_CHUNK: usize = 32;

/// Trains the projection and writes the fused model directory.
pub fn train(
    opts: &TrainOptions,
    control: &RunControl,
    observer: &mut dyn Observer,
) -> Result<Summary> {
    let (Some(teacher_arg), Some(tower_dir)) = (
        opts.model.backbone.clone(),
        opts.model.image_backbone.clone(),
    ) else {
        return Err(TrainError::invalid(
            "--objective adapter projects a pretrained image tower beside a dense teacher: give \
             the teacher as --backbone (a directory from `lexlip train --objective dense`) and \
             the tower as --image-backbone (scripts/fetch-image-backbone.sh)",
        ));
    };
    let (started, input, device) = crate::steps::begin(opts)?;
    let teacher_dir = crate::objectives::heads::backbone_dir(&teacher_arg);
    let teacher = DualEncoder::load(&teacher_dir, &device).map_err(|e| {
        TrainError::invalid(format!(
            "{}: the teacher must be a dense dual encoder from `lexlip train --objective \
             dense` ({e})",
            teacher_arg.display()
        ))
    })?;
    let tower = MobileNetV2::load(&Weights::from_safetensors_dir(&tower_dir)?, "", &device)?;
    let size = opts.model.image_backbone_size.unwrap_or(BACKBONE_SIZE);
    let inputs = ImageInputs {
        teacher: &teacher,
        backbone: &tower,
        size,
    };
    let dim_in = teacher.dim() + tower.dim()?;
    let tokenizer_path = lexlip_model::vocab::tokenizer_json(&teacher_dir);
    let tokenizer = TextTokenizer::load(&tokenizer_path, opts.data.max_length)?;
    let (mut corpus, mut key) = cached_corpus(&input, &tokenizer, &tokenizer_path, observer)?;
    let fitted = opts.fit_batch(corpus.pairs.len(), &mut |note| observer.message(note))?;
    let opts = fitted.as_ref().unwrap_or(opts);
    key["teacher"] = crate::cache::fingerprint_dir(&teacher_dir)?.into();
    key["size"] = size.into();
    let corpus_key = crate::fingerprint::sha256_json(&key);
    let cache_dir = cache_dir(opts);
    observer.message(&format!(
        "caching {} images' inputs ({dim_in} each: the teacher's {} and the tower's {}) and {} \
         captions' teacher embeddings in {}",
        corpus.images.len(),
        teacher.dim(),
        tower.dim()?,
        corpus.pairs.len(),
        cache_dir.display()
    ));
    // A cache row of pictures: both towers' inputs, one after the other.
    let tower_inputs = |images: &[PreprocessedImage]| -> Result<Vec<f32>> {
        Ok(inputs.of_images(images)?.flatten_all()?.to_vec1::<f32>()?)
    };
    let images = EmbeddingCache::build(
        &cache_dir.join(IMAGES),
        CacheMeta::new(
            &tower_dir,
            corpus_key.clone(),
            dim_in,
            &[(IMAGES, corpus.images.len())],
        )?,
        vec![image_section(
            &corpus.images,
            |bytes, name| Ok(teacher.preprocess_image(bytes, name)?),
            tower_inputs,
        )],
        &mut |d, t| observer.encoding(d, t),
    )?;
    let texts = corpus
        .texts
        .as_ref()
        .ok_or_else(|| TrainError::invalid("the corpus was read without its captions"))?;
    let captions = EmbeddingCache::build(
        &cache_dir.join(TEXTS),
        CacheMeta::new(
            &teacher_dir,
            corpus_key,
            teacher.dim(),
            &[(TEXTS, texts.len())],
        )?,
        vec![text_section(TEXTS, texts, |t| {
            text_rows(t, |t| teacher.encode_texts(t))
        })],
        &mut |d, t| observer.encoding(d, t),
    )?;
    let image_count = corpus.images.len();
    let view_count = opts.model.image_views;
    let views = ViewSpec::of(
        opts,
        teacher.image_processor(),
        key,
        &tower_dir,
        dim_in,
        IMAGE_CHUNK,
    )
    .map(|spec| {
        crate::cache::views::cache(&cache_dir, &corpus.images, &spec, tower_inputs, observer)
    })
    .transpose()?;
    let rows = PairRows::take(&mut corpus);
    let all: Vec<usize> = (0..image_count).collect();
    let (mean, std) = column_stats(&images.rows(IMAGES, &all, &device)?)?;
    let model = AdapterModel::init(dim_in, teacher.dim(), mean, std, opts.optim.seed, &device)?;
    drop(tower);
    let params = model.params();
    let order = Order::new(
        opts.optim.seed,
        rows.len() * (view_count + 1),
        opts.optim.batch_size,
    );
    let fingerprint = crate::fingerprint::sha256_json(&serde_json::json!({
        "options": opts.fingerprint_json(),
        "images": images.meta,
        "views": views.as_ref().map(|v| &v.meta),
        "texts": captions.meta,
    }));
    let trained = Trained::new(&model.store, "adapter", &params, &order);
    let mut trainer = trained.resume(opts, control, started, fingerprint, &corpus, observer)?;
    trainer.summary.images = image_count;
    trainer.summary.pairs = rows.len() * (view_count + 1);
    observer.message(&format!(
        "adapter: MLP {dim_in} → {HIDDEN} → {} onto the teacher's texts, τ {}; {} pairs{}, {} \
         steps",
        teacher.dim(),
        opts.method.tau,
        rows.len(),
        crate::cache::views::pairs_note(view_count),
        trainer.span.total
    ));
    let mut objective = AdapterSteps {
        model: &model,
        inputs: PairInputs::new(&images, views.as_ref(), &captions, &device),
        tau: opts.method.tau,
    };
    let batches = PairBatches {
        order,
        rows: &rows,
        // Hard negatives: pictures whose teacher embeddings are alike (the clock faces, the
        // families) share mini-batches, so the projection learns what tells them apart.
        grouping: Grouping::asked(
            opts,
            PairInputs::new(&images, views.as_ref(), &captions, &Device::Cpu),
            Some(teacher.dim()),
            rows.len() * (view_count + 1),
        ),
    };
    trainer.steps(&mut objective, batches, observer)?;
    let marker = opts.run.out.join(crate::encoder_pair::exported_marker(
        crate::options::Objective::Adapter,
    ));
    trainer.finish(
        &marker,
        || export(&model, &teacher_dir, &tower_dir, opts),
        || {
            Ok(serde_json::json!({
                "teacher": teacher_dir,
                "teacher_sha256": crate::cache::fingerprint_dir(&teacher_dir)?,
                "image_backbone": tower_dir,
                "image_backbone_sha256": crate::cache::fingerprint_dir(&tower_dir)?,
            }))
        },
    )
}

/// The projection's parameters and its fixed standardisation.
pub struct AdapterModel {
    pub store: VarMap,
    pub mean: Tensor,
    pub std: Tensor,
}

impl AdapterModel {
    /// A projection of `inputs` onto `dim`, PyTorch's `Linear` scale (normal, deviation
    /// `1/√fan_in`) from `seed`, zero biases.
    pub fn init(
        inputs: usize,
        dim: usize,
        mean: Tensor,
        std: Tensor,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        let store = VarMap::new();
        let pb = ParamBuilder::new(&store, Source::Random(seed), DType::F32, device);
        for (layer, outputs, inputs) in [("fc1", HIDDEN, inputs), ("fc2", dim, HIDDEN)] {
            pb.get(
                &[outputs, inputs],
                &format!("{layer}.weight"),
                Init::Normal(1.0 / (inputs as f64).sqrt()),
            )?;
            pb.get(&[outputs], &format!("{layer}.bias"), Init::Const(0.0))?;
        }
        Ok(Self { store, mean, std })
    }

    pub fn params(&self) -> Vec<Param> {
        crate::params::sorted_vars(&self.store)
            .into_iter()
            .map(|(name, var)| Param::new(name, var, 1.0))
            .collect()
    }

    /// The projection as the model crate runs it (the same tensors: gradients flow).
    pub fn adapter(&self) -> Result<Adapter> {
        let vars = self
            .store
            .data()
            .lock()
            .map_err(|_| TrainError::invalid("parameter store poisoned"))?;
        let get = |name: &str| -> Result<Tensor> {
            Ok(vars
                .get(name)
                .ok_or_else(|| TrainError::invalid(format!("no parameter {name}")))?
                .as_tensor()
                .clone())
        };
        let linear = |layer: &str| -> Result<lexlip_model::nn::Linear> {
            Ok(lexlip_model::nn::Linear {
                weight: get(&format!("{layer}.weight"))?,
                bias: Some(get(&format!("{layer}.bias"))?),
            })
        };
        Ok(Adapter {
            mean: self.mean.clone(),
            std: self.std.clone(),
            fc1: linear("fc1")?,
            fc2: linear("fc2")?,
        })
    }
}

/// The in-batch InfoNCE of projected images `(batch, dim)` and their captions' teacher
/// embeddings `(batch, dim)` (both unit-length), at `tau`, where pair `i`'s negatives leave out
/// the batch's other captions of its picture (`images[i]`). Returns `(loss, i2t, t2i)`.
pub fn masked_info_nce(
    image: &Tensor,
    text: &Tensor,
    images: &[usize],
    tau: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let b = images.len();
    let mut mask = vec![0f32; b * b];
    for i in 0..b {
        for j in 0..b {
            if i != j && images[i] == images[j] {
                mask[i * b + j] = -1e4;
            }
        }
    }
    let mask = Tensor::from_vec(mask, (b, b), image.device())?.to_dtype(image.dtype())?;
    let (i2t, t2i) = in_batch_masked(image, text, tau, Some(&mask))?;
    symmetric(i2t, t2i)
}

struct PairBatches<'a> {
    order: Order,
    rows: &'a PairRows,
    /// `--sampler grouped`: each epoch's order groups the pairs and views the teacher finds
    /// alike.
    grouping: Option<Grouping<'a>>,
}

impl Batches for PairBatches<'_> {
    type Batch = Drawn;

    fn batch(&mut self, step: u64) -> Result<Drawn> {
        if let Some(grouping) = &self.grouping {
            grouping.refresh(&mut self.order, self.rows, step)?;
        }
        // Index `v` of the order is pair `v mod P` seen through view `v div P`.
        Ok(drawn(self.order.batch(step), self.rows))
    }
}

struct AdapterSteps<'a> {
    model: &'a AdapterModel,
    inputs: PairInputs<'a>,
    tau: f64,
}

impl Losses for AdapterSteps<'_> {
    type Batch = Drawn;

    fn losses(&mut self, _step: u64, batch: Drawn) -> Result<Computed> {
        let (x, t) = self.inputs.rows(&batch)?;
        let v = l2_normalize(&self.model.adapter()?.forward(&x)?)?;
        let (total, i2t, t2i) = masked_info_nce(&v, &t, &batch.images, self.tau)?;
        Ok(Computed::new(total, vec![("i2t", i2t), ("t2i", t2i)]))
    }
}

/// Writes the fused model directory: `teacher/`, `image-backbone/`, `adapter/`, the teacher's
/// `tokenizer.json`, then `config.json` last.
fn export(model: &AdapterModel, teacher: &Path, tower: &Path, opts: &TrainOptions) -> Result<()> {
    let out = &opts.run.out;
    let [teacher_out, tower_out, adapter] = lexlip_model::fused::PARTS.map(|p| out.join(p));
    copy_part(teacher, &teacher_out)?;
    copy_files(tower, &tower_out)?;
    copy_file(
        &lexlip_model::vocab::tokenizer_json(teacher),
        &out.join("tokenizer.json"),
    )?;
    let mut tensors = snapshot(&model.store)?;
    tensors.insert("input.mean".into(), model.mean.clone());
    tensors.insert("input.std".into(), model.std.clone());
    save_part(&adapter, tensors, opts.run.save_dtype)?;
    let config = FusedConfig {
        model_type: MODEL_TYPE.into(),
        hidden: HIDDEN,
        backbone_size: opts.model.image_backbone_size.unwrap_or(BACKBONE_SIZE),
    };
    write_json(&out.join("config.json"), &config)
}
