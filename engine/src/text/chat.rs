//! Chat templates: the model's own Jinja template rendered with minijinja.
//!
//! HF `transformers` renders `chat_template` with `trim_blocks` and `lstrip_blocks`, the variables
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, and a `raise_exception` function; this
//! module does the same. Python string methods (`.strip()`, `.startswith()`...) that templates use come from
//! minijinja-contrib's pycompat layer.

use minijinja::{Environment, Error, ErrorKind, context};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// The strings a chat template may refer to besides the messages.
#[derive(Debug, Clone, Default)]
pub struct TemplateTokens {
    /// `bos_token`.
    pub bos_token: Option<String>,
    /// `eos_token`.
    pub eos_token: Option<String>,
}

/// Renders `template` for `messages`.
pub fn render_chat_template(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    tokens: &TemplateTokens,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    let err = |e: Error| EngineError::ChatTemplate(format!("{e:#}"));
    env.add_template("chat", template).map_err(err)?;
    let tmpl = env.get_template("chat").map_err(err)?;
    tmpl.render(context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => tokens.bos_token.as_deref().unwrap_or(""),
        eos_token => tokens.eos_token.as_deref().unwrap_or(""),
    })
    .map_err(err)
}

fn raise_exception(message: String) -> std::result::Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}
