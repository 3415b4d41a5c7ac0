//! The routing key a client sends with each question so that a load balancer in front of several replicas
//! sends the questions about the same documents to the same replica, whose KV cache holds them
//! (`deploy/haproxy.cfg` hashes on it): the `X-Docqa-Affinity` header, the scope's document ids sorted and
//! joined with commas. The web UI computes the same key (`web/api.js`).

/// The header's name.
pub const HEADER: &str = "X-Docqa-Affinity";

/// The key of a scope of `document_ids`: sorted, joined with commas (the order the caller listed them in
/// does not matter).
pub fn key<S: AsRef<str>>(document_ids: &[S]) -> String {
    let mut ids: Vec<&str> = document_ids.iter().map(AsRef::as_ref).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.join(",")
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn the_same_documents_in_any_order_give_the_same_key() {
        assert_eq!(key(&["b", "a", "c"]), "a,b,c");
        assert_eq!(key(&["c", "b", "a", "b"]), "a,b,c");
        assert_eq!(key(&["only"]), "only");
    }
}
