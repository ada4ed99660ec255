//! The doors of `orb` over the broker library (`orb_broker`): the command line (argument
//! syntax in [`cli`], loading config and templates in [`context`], the commands and their
//! output), the HostFactory scripts ([`hostfactory`]) and the REST daemon ([`serve`]).
#![forbid(unsafe_code)]

pub mod cli;
pub mod commands;
pub mod context;
pub mod effective_config;
pub mod failure;
pub mod hostfactory;
pub mod logging;
pub mod mcp;
pub mod provider_factory;
pub mod render;
pub mod scripts;
pub mod serve;
pub mod session;
pub mod template_checks;
