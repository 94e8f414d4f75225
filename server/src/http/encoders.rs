//! The server's encoders behind dynamic batchers: text and image → sparse lexicon vectors, and
//! (optionally) text and image → dense embeddings for the fallback.
//!
//! Encoders can come from one LexLIP model (`--model`) or separately (`--text-model`,
//! `--image-model`, `--dense-model`); a server with only a text encoder still answers
//! text→image searches over images indexed elsewhere. Asking for an encoder the server lacks is a
//! 422 that says which flag would provide it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lexlip_model::{Encoders, LoadOptions, PreprocessedImage};
use lexlip_proto::{DenseVector, SparseVector, TermSpace};

use super::batcher::{BatchConfig, Batcher};
use super::error::{ApiError, ApiResult};
use super::metrics::Metrics;

/// Where the encoders come from.
#[derive(Debug, Clone, Default)]
pub struct ModelPaths {
    pub model: Option<PathBuf>,
    pub text_model: Option<PathBuf>,
    pub image_model: Option<PathBuf>,
    pub dense_model: Option<PathBuf>,
    pub options: LoadOptions,
    pub gpu: bool,
}

struct Side<I> {
    source: Arc<Encoders>,
    batcher: Batcher<I, SparseVector>,
}

struct DenseSide {
    source: Arc<Encoders>,
    dim: usize,
    text: Batcher<String, DenseVector>,
    image: Batcher<PreprocessedImage, DenseVector>,
}

/// Loaded encoders with their batching queues.
pub struct EncoderService {
    text: Option<Side<(String, TextRole)>>,
    image: Option<Side<PreprocessedImage>>,
    dense: Option<DenseSide>,
    term_space: Option<TermSpace>,
    vocab: Option<Vec<String>>,
    describe: serde_json::Value,
    /// Weak-match thresholds of the models that encode text and image queries.
    weak_match: ByQueryModel<f64>,
    /// The IDF exponents of the models that encode text and image queries (`idf` in their
    /// `lexlip.json`), for searches that give none.
    idf: ByQueryModel<f32>,
    /// A typical real query's weight norm under the models that encode text and image
    /// queries (`query_norm` in their `lexlip.json`): it scales down weak queries' strengths.
    query_norm: ByQueryModel<f32>,
    /// The query model's card (its `README.md`), served to the page.
    readme: Option<String>,
    /// The quantization scale the lexicon models ask of a new collection (`scale` in their
    /// `lexlip.json`, or their architecture's), if not LexLIP's 100.
    scale: Option<f32>,
}

/// A setting of the models that encode queries, by query modality: the text model's for text
/// queries, the image model's for image queries (they may be different models).
pub type ByQueryModel<T> = lexlip_model::ByQueryModality<T>;

/// Largest model card served.
const MAX_README_BYTES: u64 = 256 << 10;

/// What the page says about the model that encodes queries: its directory's name, the one-line
/// `card` of its `lexlip.json` (what it was trained on, what it does not know) and its
/// `README.md`, read once at startup.
fn model_card(model: &Encoders) -> (serde_json::Value, Option<String>) {
    let dir = model.path();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let readme_path = dir.join("README.md");
    let readme = std::fs::metadata(&readme_path)
        .ok()
        .filter(|m| m.is_file() && m.len() <= MAX_README_BYTES)
        .and_then(|_| std::fs::read_to_string(&readme_path).ok());
    let describe = serde_json::json!({
        "name": name,
        "card": model.card(),
        "readme": readme.as_ref().map(|_| "/v1/model/readme"),
    });
    (describe, readme)
}

/// Whether a text is encoded to search with or to be stored: a model may cut its queries
/// otherwise than its documents (`lexlip_model::text::TextTerms::for_documents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextRole {
    Query,
    Document,
}

/// A batch of texts of either role, each encoded as its role asks, in input order.
fn encode_texts(
    enc: &lexlip_model::TextEncoder,
    items: &[(String, TextRole)],
) -> lexlip_model::Result<Vec<SparseVector>> {
    let mut out: Vec<Option<SparseVector>> = vec![None; items.len()];
    for role in [TextRole::Query, TextRole::Document] {
        let (slots, texts): (Vec<usize>, Vec<&str>) = items
            .iter()
            .enumerate()
            .filter(|(_, (_, r))| *r == role)
            .map(|(i, (t, _))| (i, t.as_str()))
            .unzip();
        if texts.is_empty() {
            continue;
        }
        let vectors = match role {
            TextRole::Query => enc.encode_queries(&texts)?,
            TextRole::Document => enc.encode(&texts)?,
        };
        for (i, v) in slots.into_iter().zip(vectors) {
            out[i] = Some(v);
        }
    }
    out.into_iter()
        .map(|v| {
            v.ok_or_else(|| {
                lexlip_model::ModelError::Invalid("the encoder returned no vector".into())
            })
        })
        .collect()
}

/// Encodes a batch, and if the batch as a whole fails, each item alone so that one bad item
/// fails only its own request.
fn each_or_batch<I, O>(
    items: Vec<I>,
    f: impl Fn(&[I]) -> lexlip_model::Result<Vec<O>>,
) -> Vec<Result<O, ApiError>> {
    match f(&items) {
        Ok(out) => out.into_iter().map(Ok).collect(),
        Err(_) if items.len() > 1 => items
            .chunks(1)
            .map(|one| match f(one) {
                Ok(mut v) if v.len() == 1 => Ok(v.remove(0)),
                Ok(_) => Err(ApiError::internal("encoder returned no result")),
                Err(e) => Err(ApiError::from(e)),
            })
            .collect(),
        Err(e) => {
            let e = ApiError::from(e);
            items.iter().map(|_| Err(e.clone())).collect()
        }
    }
}

fn load(path: &Path, paths: &ModelPaths) -> anyhow::Result<Arc<Encoders>> {
    let device = lexlip_model::device(paths.gpu)?;
    let enc = Encoders::load_with(path, &device, &paths.options)
        .map_err(|e| anyhow::Error::new(e).context(format!("loading model {}", path.display())))?;
    Ok(Arc::new(enc))
}

impl EncoderService {
    /// Loads every encoder named in `paths` and starts its batcher.
    pub fn load(paths: &ModelPaths, batch: BatchConfig, metrics: &Metrics) -> anyhow::Result<Self> {
        let model = paths.model.as_deref().map(|p| load(p, paths)).transpose()?;
        let pick = |explicit: &Option<PathBuf>,
                    has: fn(&Encoders) -> bool,
                    what: &str|
         -> anyhow::Result<Option<Arc<Encoders>>> {
            if let Some(p) = explicit {
                let e = load(p, paths)?;
                anyhow::ensure!(has(&e), "{} holds no {what} encoder", p.display());
                return Ok(Some(e));
            }
            Ok(model.clone().filter(|m| has(m)))
        };
        let text_src = pick(&paths.text_model, Encoders::has_text, "text")?;
        let image_src = pick(&paths.image_model, Encoders::has_image, "image")?;
        let dense_src = pick(
            &paths.dense_model,
            |e| e.dense().is_some(),
            "dense (CLIP or lexlip train --objective dense)",
        )?;

        let text_space = text_src
            .as_ref()
            .and_then(|e| e.text().ok().map(|t| t.term_space().clone()));
        let image_space = image_src
            .as_ref()
            .and_then(|e| e.image().ok().map(|i| i.term_space().clone()));
        if let (Some(t), Some(i)) = (&text_space, &image_space) {
            anyhow::ensure!(
                t.same_vocabulary(i),
                "the text encoder ({t}) and the image encoder ({i}) have different vocabularies; \
                 their vectors cannot be compared"
            );
        }
        let vocab = text_src
            .as_ref()
            .and_then(|e| e.text().ok().map(|t| t.vocabulary().tokens().to_vec()))
            .or_else(|| {
                image_src
                    .as_ref()
                    .and_then(|e| e.image().ok().map(|i| i.vocabulary().tokens().to_vec()))
            });
        let weak_match = ByQueryModel {
            text: text_src.as_ref().and_then(|e| e.weak_match().text),
            image: image_src.as_ref().and_then(|e| e.weak_match().image),
        };
        let idf = ByQueryModel {
            text: text_src.as_ref().and_then(|e| e.idf()),
            image: image_src.as_ref().and_then(|e| e.idf()),
        };
        let scale = text_src
            .as_ref()
            .and_then(|e| e.scale())
            .or_else(|| image_src.as_ref().and_then(|e| e.scale()));
        let query_norm = ByQueryModel {
            text: text_src.as_ref().and_then(|e| e.query_norm().text),
            image: image_src.as_ref().and_then(|e| e.query_norm().image),
        };
        let observe = |kind: &'static str| {
            let m = metrics.clone();
            Box::new(move |n: usize| m.observe_batch(kind, n)) as Box<dyn Fn(usize) + Send>
        };
        let text = text_src.map(|source| {
            let enc = source.clone();
            Side {
                source,
                batcher: Batcher::start(
                    "text",
                    batch,
                    Box::new(move |items: Vec<(String, TextRole)>| {
                        each_or_batch(items, |b| encode_texts(enc.text()?, b))
                    }),
                    observe("text"),
                ),
            }
        });
        let image = image_src.map(|source| {
            let enc = source.clone();
            Side {
                source,
                batcher: Batcher::start(
                    "image",
                    batch,
                    Box::new(move |items: Vec<PreprocessedImage>| {
                        each_or_batch(items, |b| enc.image()?.encode(b))
                    }),
                    observe("image"),
                ),
            }
        });
        let dense = match dense_src {
            None => None,
            Some(source) => {
                let dim = source.dense().map(|d| d.dim()).unwrap_or(0);
                let (t, i) = (source.clone(), source.clone());
                Some(DenseSide {
                    source,
                    dim,
                    text: Batcher::start(
                        "dense_text",
                        batch,
                        Box::new(move |items: Vec<String>| {
                            each_or_batch(items, |b| {
                                let refs: Vec<&str> = b.iter().map(String::as_str).collect();
                                match t.dense() {
                                    Some(d) => d.encode_texts(&refs),
                                    None => Ok(Vec::new()),
                                }
                            })
                        }),
                        observe("dense_text"),
                    ),
                    image: Batcher::start(
                        "dense_image",
                        batch,
                        Box::new(move |items: Vec<PreprocessedImage>| {
                            each_or_batch(items, |b| match i.dense() {
                                Some(d) => d.encode_images(b),
                                None => Ok(Vec::new()),
                            })
                        }),
                        observe("dense_image"),
                    ),
                })
            }
        };
        let query_model = text
            .as_ref()
            .map(|s| s.source.clone())
            .or_else(|| image.as_ref().map(|s| s.source.clone()));
        let (card, readme) = match &query_model {
            Some(model) if model.path().is_dir() => model_card(model),
            _ => (serde_json::Value::Null, None),
        };
        let describe = serde_json::json!({
            "model": card,
            "text": text.as_ref().map(|s| s.source.path().display().to_string()),
            "image": image.as_ref().map(|s| s.source.path().display().to_string()),
            "dense": dense.as_ref().map(|s| s.source.path().display().to_string()),
            "dense_dim": dense.as_ref().map(|d| d.dim),
            "term_space": text_space.as_ref().or(image_space.as_ref()).map(|t| t.to_string()),
            "weak_match": weak_match,
            "query_norm": query_norm,
            "idf": idf,
            "scale": scale,
        });
        Ok(Self {
            text,
            image,
            dense,
            term_space: text_space.or(image_space),
            vocab,
            describe,
            weak_match,
            idf,
            query_norm,
            readme,
            scale,
        })
    }

    /// The quantization scale a new collection takes when its request gives none: the lexicon
    /// models' own (VDR's unit-length lexicons), if not LexLIP's 100.
    pub fn scale(&self) -> Option<f32> {
        self.scale
    }

    /// The query model's `README.md`, when it has one.
    pub fn readme(&self) -> Option<&str> {
        self.readme.as_deref()
    }

    /// The match strength below which hits of a text / image query are weak, when the model
    /// that encodes such queries is calibrated.
    pub fn weak_match(&self) -> ByQueryModel<f64> {
        self.weak_match
    }

    /// The IDF exponents of the models that encode text and image queries, when they have
    /// one.
    pub fn idf(&self) -> ByQueryModel<f32> {
        self.idf
    }

    /// The typical query norms of the models that encode text and image queries, when they
    /// have one.
    pub fn query_norm(&self) -> ByQueryModel<f32> {
        self.query_norm
    }

    /// What is loaded, for `/readyz` and the startup log.
    pub fn describe(&self) -> &serde_json::Value {
        &self.describe
    }

    /// The lexicon term space of the sparse encoders (None when no sparse encoder is loaded).
    pub fn term_space(&self) -> Option<&TermSpace> {
        self.term_space.as_ref()
    }

    /// Tokens of that term space in id order.
    pub fn vocab(&self) -> Option<&[String]> {
        self.vocab.as_deref()
    }

    pub fn dense_dim(&self) -> Option<usize> {
        self.dense.as_ref().map(|d| d.dim)
    }

    /// Items waiting per queue (for `/metrics`).
    pub fn queue_depths(&self) -> Vec<(&'static str, usize)> {
        let mut out = Vec::new();
        if let Some(s) = &self.text {
            out.push((s.batcher.name(), s.batcher.depth()));
        }
        if let Some(s) = &self.image {
            out.push((s.batcher.name(), s.batcher.depth()));
        }
        if let Some(d) = &self.dense {
            out.push((d.text.name(), d.text.depth()));
            out.push((d.image.name(), d.image.depth()));
        }
        out
    }

    /// Encodes a text to search with (batched with other requests' texts).
    pub async fn text(&self, text: String) -> ApiResult<SparseVector> {
        self.text_as(text, TextRole::Query).await
    }

    /// Encodes a text to be stored as a document.
    pub async fn text_document(&self, text: String) -> ApiResult<SparseVector> {
        self.text_as(text, TextRole::Document).await
    }

    async fn text_as(&self, text: String, role: TextRole) -> ApiResult<SparseVector> {
        let side = self.text.as_ref().ok_or_else(|| {
            ApiError::unprocessable(
                "this server has no text encoder: start it with --model (a LexLIP model) or --text-model",
            )
        })?;
        if text.trim().is_empty() {
            return Err(ApiError::unprocessable("the text is empty"));
        }
        side.batcher.submit((text, role)).await
    }

    /// Decodes, preprocesses (on a blocking thread) and encodes an image; `name` names it in
    /// errors.
    pub async fn image(&self, bytes: Arc<Vec<u8>>, name: String) -> ApiResult<SparseVector> {
        Ok(self.image_with_thumbnail(bytes, name, false).await?.0)
    }

    /// [`Self::image`], and with `thumbnail` the image's thumbnail from the same decode.
    pub async fn image_with_thumbnail(
        &self,
        bytes: Arc<Vec<u8>>,
        name: String,
        thumbnail: bool,
    ) -> ApiResult<(SparseVector, Option<Vec<u8>>)> {
        let (pre, thumbnail) = self.preprocess_image(bytes, name, thumbnail).await?;
        Ok((self.encode_preprocessed(pre).await?, thumbnail))
    }

    /// Encodes an image [`Self::preprocess_image`] made, batched with other requests' images.
    pub async fn encode_preprocessed(&self, pre: PreprocessedImage) -> ApiResult<SparseVector> {
        self.image_side()?.batcher.submit(pre).await
    }

    /// Decodes and preprocesses an image on a blocking thread (the step that holds full-size
    /// pixels, within the decode budget), and with `thumbnail` makes its thumbnail from the same
    /// decode. An image that decodes always has one; should encoding it fail all the same, the
    /// thumbnail is `None` (logged), so a thumbnail never fails an add.
    pub async fn preprocess_image(
        &self,
        bytes: Arc<Vec<u8>>,
        name: String,
        thumbnail: bool,
    ) -> ApiResult<(PreprocessedImage, Option<Vec<u8>>)> {
        let enc = self.image_side()?.source.clone();
        tokio::task::spawn_blocking(move || -> ApiResult<(PreprocessedImage, Option<Vec<u8>>)> {
            let rgb = lexlip_model::image::decode_rgb(&bytes, &name)?;
            let thumbnail =
                match thumbnail.then(|| lexlip_model::thumbnail::of(&bytes, &rgb, &name)) {
                    Some(Ok(t)) => Some(t),
                    Some(Err(e)) => {
                        tracing::warn!(image = %name, error = %e, "added without a thumbnail");
                        None
                    }
                    None => None,
                };
            Ok((
                enc.image()?.processor().preprocess_rgb(&rgb, &name)?,
                thumbnail,
            ))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    }

    fn image_side(&self) -> ApiResult<&Side<PreprocessedImage>> {
        self.image.as_ref().ok_or_else(|| {
            ApiError::unprocessable(
                "this server has no image encoder: start it with --model (a LexLIP model) or --image-model",
            )
        })
    }

    pub fn has_dense(&self) -> bool {
        self.dense.is_some()
    }

    pub async fn dense_text(&self, text: String) -> ApiResult<DenseVector> {
        let side = self.dense_side()?;
        side.text.submit(text).await
    }

    pub async fn dense_image(&self, bytes: Arc<Vec<u8>>, name: String) -> ApiResult<DenseVector> {
        let side = self.dense_side()?;
        let enc = side.source.clone();
        let pre = tokio::task::spawn_blocking(move || -> ApiResult<PreprocessedImage> {
            let d = enc
                .dense()
                .ok_or_else(|| ApiError::internal("dense encoder missing"))?;
            Ok(d.preprocess_image(&bytes, &name)?)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
        side.image.submit(pre).await
    }

    fn dense_side(&self) -> ApiResult<&DenseSide> {
        self.dense.as_ref().ok_or_else(|| {
            ApiError::unprocessable(
                "this server has no dense encoder: start it with --dense-model (a CLIP, SigLIP or MobileCLIP directory \
                 or a lexlip train --objective dense model), or send a precomputed dense vector",
            )
        })
    }
}
