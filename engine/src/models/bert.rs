//! The BERT encoder and the sentence embedder built on it (all-MiniLM-L6-v2: mean pooling over the real
//! tokens, then L2 normalisation).
//!
//! Tensor names are HF's without the `bert.` prefix (`encoder.layer.{i}.attention.self.query.weight`);
//! a prefixed checkpoint is accepted too. A batch is packed without padding: the texts' tokens are
//! concatenated and attention runs within each text (varlen), which is exactly a padded batch with an
//! attention mask, minus the work on padding. Inputs are truncated at 256 tokens.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationParams};

use crate::backend::cpu::CpuBackend;
use crate::backend::{AttnShape, Backend};
use crate::config::BertConfig;
use crate::error::{EngineError, Result};
use crate::models::{matrix, vector};
use crate::weights::Weights;

/// Longest input in tokens; longer texts are truncated.
pub const MAX_TOKENS: usize = 256;
/// Most tokens packed into one forward pass.
const MAX_BATCH_TOKENS: usize = 8192;

struct Linear<B: Backend> {
    w: B::Weight,
    b: B::Weight,
}

struct Norm<B: Backend> {
    w: B::Weight,
    b: B::Weight,
}

struct Layer<B: Backend> {
    q: Linear<B>,
    k: Linear<B>,
    v: Linear<B>,
    o: Linear<B>,
    attn_norm: Norm<B>,
    up: Linear<B>,
    down: Linear<B>,
    out_norm: Norm<B>,
}

/// A BERT encoder on backend `B`.
pub struct Bert<B: Backend> {
    backend: B,
    config: BertConfig,
    word: B::Weight,
    position: B::Weight,
    token_type: B::Weight,
    emb_norm: Norm<B>,
    layers: Vec<Layer<B>>,
}

impl<B: Backend> Bert<B> {
    /// Loads `config.json` and the weights of `dir`.
    pub fn load(backend: B, dir: &Path) -> Result<Self> {
        let config = BertConfig::load(&dir.join("config.json"))?;
        let w = Weights::open_dir(dir)?;
        let p = if w.contains("bert.embeddings.word_embeddings.weight") {
            "bert."
        } else {
            ""
        };
        let h = config.hidden_size;
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(&backend, &w, &config, &format!("{p}encoder.layer.{i}")))
            .collect::<Result<_>>()?;
        Ok(Bert {
            word: matrix(
                &backend,
                &w,
                &format!("{p}embeddings.word_embeddings.weight"),
                [config.vocab_size, h],
            )?,
            position: matrix(
                &backend,
                &w,
                &format!("{p}embeddings.position_embeddings.weight"),
                [config.max_position_embeddings, h],
            )?,
            token_type: matrix(
                &backend,
                &w,
                &format!("{p}embeddings.token_type_embeddings.weight"),
                [config.type_vocab_size, h],
            )?,
            emb_norm: norm(&backend, &w, &format!("{p}embeddings.LayerNorm"), h)?,
            layers,
            config,
            backend,
        })
    }

    /// Hidden states `[tokens, hidden]` of a packed batch: `ids` holds the sequences back to back,
    /// `starts` their row offsets (`num_seqs + 1` entries).
    pub fn encode(&self, ids: &[u32], starts: &[u32]) -> Result<Vec<f32>> {
        let (b, cfg) = (&self.backend, &self.config);
        let (n, h, f) = (ids.len(), cfg.hidden_size, cfg.intermediate_size);
        if ids.iter().any(|&t| t as usize >= cfg.vocab_size) {
            return Err(EngineError::InvalidBatch(
                "token id outside the BERT vocabulary".into(),
            ));
        }
        let positions: Vec<u32> = starts.windows(2).flat_map(|w| 0..w[1] - w[0]).collect();
        if positions
            .iter()
            .any(|&p| p as usize >= cfg.max_position_embeddings)
        {
            return Err(EngineError::ContextTooLong {
                len: positions.len(),
                max: cfg.max_position_embeddings,
            });
        }
        let mut idx = b.alloc_ids(n.max(starts.len()))?;
        let (mut x, mut t, mut t2) = (b.alloc(n * h)?, b.alloc(n * h)?, b.alloc(n * h)?);
        let (mut q, mut k, mut v) = (b.alloc(n * h)?, b.alloc(n * h)?, b.alloc(n * h)?);
        let mut inter = b.alloc(n * f)?;
        b.write_ids(&mut idx, ids)?;
        b.embedding(&self.word, &idx, n, 0, &mut t)?;
        b.write_ids(&mut idx, &positions)?;
        b.embedding(&self.position, &idx, n, 0, &mut t2)?;
        b.add(&mut t, &t2, n * h)?;
        b.write_ids(&mut idx, &vec![0; n])?;
        b.embedding(&self.token_type, &idx, n, 0, &mut t2)?;
        b.add(&mut t, &t2, n * h)?;
        let eps = cfg.layer_norm_eps as f32;
        b.layer_norm(&t, &self.emb_norm.w, &self.emb_norm.b, eps, n, &mut x)?;
        b.write_ids(&mut idx, starts)?;
        let heads = cfg.num_attention_heads;
        let shape = AttnShape {
            num_heads: heads,
            num_kv_heads: heads,
            head_dim: h / heads,
            scale: 1.0 / ((h / heads) as f32).sqrt(),
        };
        for l in &self.layers {
            b.matmul(&x, &l.q.w, Some(&l.q.b), n, &mut q)?;
            b.matmul(&x, &l.k.w, Some(&l.k.b), n, &mut k)?;
            b.matmul(&x, &l.v.w, Some(&l.v.b), n, &mut v)?;
            b.varlen_attention(&q, &k, &v, &idx, (starts.len() - 1, n), shape, &mut t)?;
            b.matmul(&t, &l.o.w, Some(&l.o.b), n, &mut t2)?;
            b.add(&mut t2, &x, n * h)?;
            b.layer_norm(&t2, &l.attn_norm.w, &l.attn_norm.b, eps, n, &mut x)?;
            b.matmul(&x, &l.up.w, Some(&l.up.b), n, &mut inter)?;
            b.gelu(&mut inter, n * f)?;
            b.matmul(&inter, &l.down.w, Some(&l.down.b), n, &mut t2)?;
            b.add(&mut t2, &x, n * h)?;
            b.layer_norm(&t2, &l.out_norm.w, &l.out_norm.b, eps, n, &mut x)?;
        }
        let mut out = vec![0.0; n * h];
        b.read(&x, &mut out)?;
        Ok(out)
    }
}

fn load_layer<B: Backend>(b: &B, w: &Weights, cfg: &BertConfig, p: &str) -> Result<Layer<B>> {
    let (h, f) = (cfg.hidden_size, cfg.intermediate_size);
    Ok(Layer {
        q: linear(b, w, &format!("{p}.attention.self.query"), h, h)?,
        k: linear(b, w, &format!("{p}.attention.self.key"), h, h)?,
        v: linear(b, w, &format!("{p}.attention.self.value"), h, h)?,
        o: linear(b, w, &format!("{p}.attention.output.dense"), h, h)?,
        attn_norm: norm(b, w, &format!("{p}.attention.output.LayerNorm"), h)?,
        up: linear(b, w, &format!("{p}.intermediate.dense"), f, h)?,
        down: linear(b, w, &format!("{p}.output.dense"), h, f)?,
        out_norm: norm(b, w, &format!("{p}.output.LayerNorm"), h)?,
    })
}

fn linear<B: Backend>(b: &B, w: &Weights, p: &str, out: usize, inp: usize) -> Result<Linear<B>> {
    Ok(Linear {
        w: matrix(b, w, &format!("{p}.weight"), [out, inp])?,
        b: vector(b, w, &format!("{p}.bias"), out)?,
    })
}

fn norm<B: Backend>(b: &B, w: &Weights, p: &str, h: usize) -> Result<Norm<B>> {
    Ok(Norm {
        w: vector(b, w, &format!("{p}.weight"), h)?,
        b: vector(b, w, &format!("{p}.bias"), h)?,
    })
}

/// Sentence embeddings: tokenizer + BERT + mean pooling + L2 normalisation, on the CPU or a GPU.
pub struct BertEmbedder {
    model: EmbedModel,
    tokenizer: Tokenizer,
}

/// The BERT of an embedder, on the backend it was loaded on.
enum EmbedModel {
    Cpu(Box<Bert<CpuBackend>>),
    #[cfg(feature = "cuda")]
    Cuda(Box<Bert<crate::backend::cuda::CudaBackend>>),
}

impl EmbedModel {
    fn config(&self) -> &BertConfig {
        match self {
            EmbedModel::Cpu(m) => &m.config,
            #[cfg(feature = "cuda")]
            EmbedModel::Cuda(m) => &m.config,
        }
    }

    fn encode(&self, ids: &[u32], starts: &[u32]) -> Result<Vec<f32>> {
        match self {
            EmbedModel::Cpu(m) => m.encode(ids, starts),
            #[cfg(feature = "cuda")]
            EmbedModel::Cuda(m) => m.encode(ids, starts),
        }
    }
}

impl BertEmbedder {
    /// Loads the model directory (`config.json`, `model.safetensors`, `tokenizer.json`) on the CPU. The
    /// tokenizer's own padding is switched off and truncation set to [`MAX_TOKENS`].
    pub fn load(dir: &Path) -> Result<Self> {
        let model = Bert::load(CpuBackend::new(), dir)?;
        Self::with_model(EmbedModel::Cpu(Box::new(model)), dir)
    }

    /// [`BertEmbedder::load`] with the model on a CUDA backend.
    #[cfg(feature = "cuda")]
    pub fn load_cuda(dir: &Path, backend: crate::backend::cuda::CudaBackend) -> Result<Self> {
        Self::with_model(EmbedModel::Cuda(Box::new(Bert::load(backend, dir)?)), dir)
    }

    fn with_model(model: EmbedModel, dir: &Path) -> Result<Self> {
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        let max_length = MAX_TOKENS.min(model.config().max_position_embeddings);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        Ok(BertEmbedder { model, tokenizer })
    }

    /// Width of the embeddings.
    pub fn dim(&self) -> usize {
        self.model.config().hidden_size
    }

    /// One unit-length embedding per text.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut out = Vec::with_capacity(texts.len());
        let mut i = 0;
        while i < ids.len() {
            let mut j = i + 1;
            let mut tokens = ids[i].len();
            while j < ids.len() && tokens + ids[j].len() <= MAX_BATCH_TOKENS {
                tokens += ids[j].len();
                j += 1;
            }
            out.extend(self.embed_packed(&ids[i..j])?);
            i = j;
        }
        Ok(out)
    }

    fn embed_packed(&self, seqs: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let flat: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        let mut starts = vec![0u32];
        seqs.iter()
            .for_each(|s| starts.push(starts[starts.len() - 1] + s.len() as u32));
        let hidden = self.model.encode(&flat, &starts)?;
        let h = self.dim();
        Ok(starts
            .windows(2)
            .map(|w| pool(&hidden[w[0] as usize * h..w[1] as usize * h], h))
            .collect())
    }
}

/// Mean of the rows of `x[rows, h]`, scaled to unit length.
fn pool(x: &[f32], h: usize) -> Vec<f32> {
    let rows = (x.len() / h).max(1);
    let mut mean = vec![0.0f32; h];
    x.chunks_exact(h)
        .for_each(|r| mean.iter_mut().zip(r).for_each(|(m, v)| *m += v));
    mean.iter_mut().for_each(|m| *m /= rows as f32);
    let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    mean.iter_mut().for_each(|m| *m /= norm);
    mean
}
