//! [`TextTokenizer`]: a model directory's `tokenizer.json`, its end-of-sequence ids and chat template.
//!
//! End-of-sequence ids are gathered from `generation_config.json`, `config.json` and the `eos_token` of
//! `tokenizer_config.json`. The chat template comes from `tokenizer_config.json` (`chat_template`, a string
//! or a list of named templates) or from `chat_template.jinja`.

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::chat::{ChatMessage, TemplateTokens, render_chat_template};
use super::stream::StreamDecoder;
use crate::error::{EngineError, Result};

/// A model's tokenizer with the metadata generation needs.
pub struct TextTokenizer {
    inner: Tokenizer,
    eos_ids: Vec<u32>,
    chat_template: Option<String>,
    template_tokens: TemplateTokens,
}

impl TextTokenizer {
    /// Loads `tokenizer.json` and the configuration files next to it from an HF-style model directory.
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let inner = Tokenizer::from_file(&path)
            .map_err(|e| EngineError::Tokenizer(format!("cannot load {}: {e}", path.display())))?;
        let tokenizer_config = read_json(&dir.join("tokenizer_config.json"))?;
        let template_tokens = TemplateTokens {
            bos_token: token_text(tokenizer_config.get("bos_token")),
            eos_token: token_text(tokenizer_config.get("eos_token")),
        };
        let mut eos_ids = Vec::new();
        for file in ["generation_config.json", "config.json"] {
            let config = read_json(&dir.join(file))?;
            collect_ids(config.get("eos_token_id"), &mut eos_ids);
        }
        if let Some(id) = template_tokens.eos_token.as_deref().and_then(|t| inner.token_to_id(t)) {
            push_unique(&mut eos_ids, id);
        }
        let chat_template = chat_template(dir, &tokenizer_config)?;
        Ok(Self {
            inner,
            eos_ids,
            chat_template,
            template_tokens,
        })
    }

    /// Token ids of `text`; `add_special` adds what the tokenizer's post-processor adds (e.g. BOS).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, add_special)
            .map_err(|e| EngineError::Tokenizer(format!("cannot encode: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| EngineError::Tokenizer(format!("cannot decode: {e}")))
    }

    /// A streaming decoder for generated tokens (special tokens left out).
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self.inner.decode_stream(true))
    }

    /// Ids that end generation.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Renders the model's chat template for `messages`.
    pub fn apply_chat_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| EngineError::ChatTemplate("the model directory has no chat template".into()))?;
        render_chat_template(template, messages, add_generation_prompt, &self.template_tokens)
    }
}

/// Parses a JSON file; an absent file reads as `null`.
fn read_json(path: &Path) -> Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| EngineError::json(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Null),
        Err(e) => Err(EngineError::io(path, e)),
    }
}

/// A token given as `"<s>"` or as `{"content": "<s>", ...}`.
fn token_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// Appends the ids of an `eos_token_id` value (a number or a list of numbers).
fn collect_ids(value: Option<&Value>, out: &mut Vec<u32>) {
    let ids: Vec<&Value> = match value {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(v) => vec![v],
        None => Vec::new(),
    };
    for id in ids.into_iter().filter_map(Value::as_u64).filter_map(|v| u32::try_from(v).ok()) {
        push_unique(out, id);
    }
}

fn push_unique(out: &mut Vec<u32>, id: u32) {
    if !out.contains(&id) {
        out.push(id);
    }
}

/// The chat template from `tokenizer_config.json` or `chat_template.jinja`.
fn chat_template(dir: &Path, tokenizer_config: &Value) -> Result<Option<String>> {
    match tokenizer_config.get("chat_template") {
        Some(Value::String(t)) => return Ok(Some(t.clone())),
        Some(Value::Array(named)) => {
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template")?.as_str());
            if let Some(t) = default {
                return Ok(Some(t.to_owned()));
            }
        }
        _ => {}
    }
    let path = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EngineError::io(&path, e)),
    }
}
