//! The repetition guard: ends a generation that has fallen into a loop (one block of tokens repeated
//! back to back), which small models do when greedy decoding finds no way out ("A - 13 A - 13 …" until
//! the token cap). The request then finishes with [`crate::serving::FinishReason::Loop`].

/// The longest repeated block looked for, in tokens.
pub const MAX_PERIOD: usize = 48;
/// A loop is a block repeated at least this many times back to back…
pub const MIN_REPEATS: usize = 3;
/// …covering at least this many tokens (a short block must repeat more often).
pub const MIN_SPAN: usize = 32;

/// The length of the block that `generated` ends repeating, if its last
/// `max(MIN_REPEATS · period, MIN_SPAN)` tokens are one block of `period ≤ MAX_PERIOD` tokens over and
/// over; the shortest such block.
pub fn repeating_block(generated: &[u32]) -> Option<usize> {
    (1..=MAX_PERIOD).find(|&period| {
        let span = (MIN_REPEATS * period).max(MIN_SPAN);
        generated.len() >= span && {
            let tail = &generated[generated.len() - span..];
            tail[period..]
                .iter()
                .zip(tail)
                .all(|(later, earlier)| later == earlier)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeated(block: &[u32], times: usize) -> Vec<u32> {
        block
            .iter()
            .copied()
            .cycle()
            .take(block.len() * times)
            .collect()
    }

    #[test]
    fn a_block_repeated_over_the_span_is_a_loop_of_its_length() {
        let mut answer = vec![7, 8, 9];
        answer.extend(repeated(&[11, 12, 13, 14], 8));
        assert_eq!(repeating_block(&answer), Some(4));
        assert_eq!(repeating_block(&repeated(&[5], MIN_SPAN)), Some(1));
        let long: Vec<u32> = (100..100 + MAX_PERIOD as u32).collect();
        assert_eq!(
            repeating_block(&repeated(&long, MIN_REPEATS)),
            Some(MAX_PERIOD)
        );
    }

    #[test]
    fn too_few_repeats_or_too_short_a_span_is_not_a_loop() {
        assert_eq!(repeating_block(&repeated(&[5], MIN_SPAN - 1)), None);
        assert_eq!(repeating_block(&repeated(&[1, 2, 3, 4], 7)), None); // 28 < 32 tokens
        let block: Vec<u32> = (0..20).collect();
        assert_eq!(repeating_block(&repeated(&block, 2)), None); // 2 < 3 repeats
        let long: Vec<u32> = (0..MAX_PERIOD as u32 + 1).collect();
        assert_eq!(repeating_block(&repeated(&long, 4)), None); // block longer than MAX_PERIOD
    }

    #[test]
    fn ordinary_text_and_a_loop_broken_at_the_end_are_not_loops() {
        let text: Vec<u32> = (0..200).map(|i| (i * 7919 % 1000) as u32).collect();
        assert_eq!(repeating_block(&text), None);
        let mut broken = repeated(&[11, 12, 13, 14], 10);
        broken.push(99);
        assert_eq!(repeating_block(&broken), None);
    }
}
