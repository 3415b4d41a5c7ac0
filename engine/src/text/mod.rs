//! Text in and out of the models: the tokenizer wrapper ([`TextTokenizer`]), chat templates
//! ([`ChatMessage`], rendered with minijinja as HF `transformers` renders them) and the streaming
//! detokeniser ([`StreamDecoder`]).

pub mod chat;
pub mod stream;
pub mod tokenizer;

pub use chat::ChatMessage;
pub use stream::StreamDecoder;
pub use tokenizer::TextTokenizer;
