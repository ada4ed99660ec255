//! The `orb` command line: argument syntax ([`cli`]), loading config and templates
//! ([`context`]), the request orchestration ([`broker`]), the commands and their output.
#![forbid(unsafe_code)]

pub mod broker;
pub mod cli;
pub mod commands;
pub mod context;
pub mod failure;
pub mod hostfactory;
pub mod logging;
pub mod provider_factory;
pub mod render;
pub mod scripts;
pub mod serve;
pub mod template_checks;
pub mod usage;
