//! Independent pieces of work on threads of their own, their results in the order of the
//! pieces: what the pipeline runs side by side on a large policy set (documents of one file,
//! the two families, the tables). A panic in a piece is the caller's panic.

/// `work` applied to every item, each on a scoped thread; the results in the items' order.
/// One item (or none) runs on the calling thread.
pub fn map<I, R>(items: Vec<I>, work: impl Fn(I) -> R + Sync) -> Vec<R>
where
    I: Send,
    R: Send,
{
    if items.len() < 2 {
        return items.into_iter().map(work).collect();
    }
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .into_iter()
            .map(|item| scope.spawn(move || work(item)))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_in_the_order_of_the_items() {
        let squares = super::map((0..64).collect(), |n: u64| {
            std::thread::sleep(std::time::Duration::from_micros(64 - n));
            n * n
        });
        assert_eq!(squares, (0..64).map(|n| n * n).collect::<Vec<_>>());
    }
}
