//! HostFactory script input, as `orb` reads it from `-f FILE` / `-d JSON`: the bytes are parsed
//! as JSON and handed to every input parser. Invariant: no parser panics; a bad input is an
//! `HfInputError` whose message is not empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orb_core::hostfactory::input::{
    RequestMachinesInput, RequestStatusQuery, ReturnMachinesInput, ReturnRequestsQuery,
};
use serde_json::Value;

fn check<T>(result: Result<T, orb_core::hostfactory::input::HfInputError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            assert!(
                !e.to_string().is_empty(),
                "an input error must say what is wrong"
            );
            None
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Some(request) = check(RequestMachinesInput::parse(&value)) {
        assert!(
            request.machine_count >= 1,
            "a request asks for at least one machine"
        );
        assert!(!request.template_id.trim().is_empty());
    }
    for machines in [
        check(ReturnMachinesInput::parse(&value)).map(|i| i.machines),
        check(ReturnRequestsQuery::parse(&value)).map(|i| i.machines),
    ]
    .into_iter()
    .flatten()
    {
        for selector in &machines {
            assert!(!selector.label().is_empty(), "every selector names a host");
        }
    }
    let _ = check(RequestStatusQuery::parse(&value));
});
