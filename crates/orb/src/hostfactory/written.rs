//! [`WrittenMachines`]: `orb serve` keeps the machines of its big requests as its last
//! getRequestStatus reply wrote them. HostFactory polls every request it waits on, and a
//! completed 5,000-machine request reads the same kept machine list from the store call
//! after call; writing its 3.4 MB of JSON again was half of what such a call cost the daemon.

use std::sync::Arc;

use orb_core::hostfactory::machine_items;
use orb_core::kept::{KeptCache, Weighed};
use orb_core::machine::MachineList;
use orb_core::request::Request;
use orb_core::shared::Shared;

/// Lists shorter than this are written on every call (a few hundred microseconds at most),
/// so polling many small requests does not churn the kept ones.
const MIN_MACHINES: usize = 500;

/// Machines kept in all, as many as the store keeps machine lists for: a kept list is
/// mostly the store's own, held here a little longer.
const LIMIT_MACHINES: usize = 20_000;

/// The written machines of recently read requests, by request id (which names its type
/// too: an acquire's and a return's items differ), least recently used dropped first. An
/// entry holds the machine list it was written from, so the list cannot change under it (a
/// write to a shared list copies it first) and its address cannot be reused: the same
/// address is the same machines.
#[derive(Debug, Clone, Default)]
pub struct WrittenMachines(KeptCache<Written, LIMIT_MACHINES>);

#[derive(Debug, Clone)]
struct Written {
    list: MachineList,
    items: Arc<str>,
}

impl Weighed for Written {
    fn weight(&self) -> usize {
        self.list.len()
    }
}

impl WrittenMachines {
    /// `machines` of `request` written as the reply's array items
    /// ([`machine_items`]): the kept text when this request's list is the one it was
    /// written from, else written now (and kept, for a big list). `None` for a short list,
    /// which the caller writes with the rest of the reply.
    pub fn items(&self, request: &Request, machines: &MachineList) -> Option<Arc<str>> {
        if machines.len() < MIN_MACHINES {
            return None;
        }
        let id = request.request_id.as_str();
        if let Some(kept) = self
            .0
            .kept_if(id, |kept| Shared::ptr_eq(&kept.value.list, machines))
        {
            return Some(kept.items);
        }
        let items: Arc<str> = machine_items(request.request_type, machines).into();
        let written = Written {
            list: machines.clone(),
            items: items.clone(),
        };
        self.0.put(id.to_string(), written, None);
        Some(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orb_core::machine::MachineStatus;
    use orb_core::request::RequestType;
    use orb_core::test_support;

    fn request(kind: RequestType) -> Request {
        test_support::request(kind).build()
    }

    fn list(n: usize, tag: &str) -> MachineList {
        Shared::new(
            (0..n)
                .map(|i| {
                    test_support::machine(&format!("orb-{tag}-{i:05}"))
                        .status(MachineStatus::Running)
                        .build()
                })
                .collect(),
        )
    }

    #[test]
    fn a_big_list_is_written_once_while_it_is_the_same_list() {
        let written = WrittenMachines::default();
        let acquire = request(RequestType::Acquire);
        let machines = list(MIN_MACHINES, "a");
        let first = written.items(&acquire, &machines).unwrap();
        assert_eq!(
            *first,
            machine_items(RequestType::Acquire, &machines),
            "the kept text is what the list writes"
        );
        let again = written.items(&acquire, &machines.clone()).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same list is not written again"
        );

        // Any write to the list makes a new one (the kept entry shares it), written anew.
        let mut changed = machines.clone();
        changed[7].status = MachineStatus::Failed;
        let rewritten = written.items(&acquire, &changed).unwrap();
        assert!(!Arc::ptr_eq(&first, &rewritten));
        assert_eq!(*rewritten, machine_items(RequestType::Acquire, &changed));
        assert_ne!(rewritten, first);

        // An equal list that is not the same one is written again: only identity counts.
        let copy = Shared::new((*changed).clone());
        assert!(!Arc::ptr_eq(
            &rewritten,
            &written.items(&acquire, &copy).unwrap()
        ));
    }

    #[test]
    fn text_is_kept_per_request() {
        let written = WrittenMachines::default();
        let machines = list(MIN_MACHINES, "a");
        let (one, two) = (request(RequestType::Acquire), request(RequestType::Acquire));
        let ret = request(RequestType::Return);
        let for_one = written.items(&one, &machines).unwrap();
        let for_two = written.items(&two, &machines).unwrap();
        assert!(
            !Arc::ptr_eq(&for_one, &for_two),
            "each request keeps its own"
        );
        let for_return = written.items(&ret, &machines).unwrap();
        assert_eq!(*for_return, machine_items(RequestType::Return, &machines));
        assert_ne!(
            for_return, for_one,
            "a return writes each machine's acquire"
        );
        assert!(Arc::ptr_eq(
            &for_one,
            &written.items(&one, &machines).unwrap()
        ));
    }

    #[test]
    fn short_lists_are_not_kept_and_the_oldest_go_past_the_limit() {
        let written = WrittenMachines::default();
        let short = list(MIN_MACHINES - 1, "s");
        let asked = request(RequestType::Acquire);
        assert!(written.items(&asked, &short).is_none());
        assert!(!written.0.holds(asked.request_id.as_str()), "not kept");

        let per = LIMIT_MACHINES / 4;
        let lists: Vec<MachineList> = (0..5).map(|i| list(per, &format!("l{i}"))).collect();
        let requests: Vec<Request> = (0..5).map(|_| request(RequestType::Acquire)).collect();
        let first: Vec<Arc<str>> = (0..4)
            .map(|i| written.items(&requests[i], &lists[i]).unwrap())
            .collect();
        // A use makes the first the most recent: the fifth list pushes out the second.
        assert!(Arc::ptr_eq(
            &first[0],
            &written.items(&requests[0], &lists[0]).unwrap()
        ));
        written.items(&requests[4], &lists[4]).unwrap();
        let kept: Vec<bool> = requests
            .iter()
            .map(|r| written.0.holds(r.request_id.as_str()))
            .collect();
        assert_eq!(kept.iter().filter(|k| **k).count(), 4, "{kept:?}");
        assert!(!kept[1], "the second is the one dropped: {kept:?}");
        assert!(Arc::ptr_eq(
            &first[0],
            &written.items(&requests[0], &lists[0]).unwrap()
        ));
        assert!(!Arc::ptr_eq(
            &first[1],
            &written.items(&requests[1], &lists[1]).unwrap()
        ));
    }
}
