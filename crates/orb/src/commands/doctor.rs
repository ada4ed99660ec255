//! `orb doctor`: the checks of `orb_k8s::doctor` for the selected provider, as a report.

use orb_k8s::config::{
    AuthEnvironment, build_kube_client_with, plan_auth, resolve_default_namespace,
};
use orb_k8s::doctor::{CheckResult, run_checks};
use serde_json::json;

use super::config::effective_provider;
use crate::failure::{CliResult, Failure};
use crate::render::{self, Table};
use crate::session::{Output, Session};

pub async fn run(session: &Session) -> CliResult<Output> {
    let loaded = session.config()?;
    let Some((entry, resolved)) = effective_provider(session, &loaded, None)? else {
        return Err(Failure::invalid(
            "orb doctor checks Kubernetes providers; the selected provider is of another type",
        ));
    };
    let cfg = &resolved.config;
    let env = AuthEnvironment::detect();
    let plan = plan_auth(cfg, &env).map_err(|e| Failure::invalid(e.to_string()))?;
    let scope = cfg.namespace_scope(&resolve_default_namespace(&plan, &env));
    let results = match build_kube_client_with(cfg, &env).await {
        Ok(client) => run_checks(&client, cfg, &scope).await,
        Err(e) => vec![CheckResult {
            check: "credentials".into(),
            ok: false,
            detail: e.to_string(),
            fix: Some(
                "fix kubeconfig_path / context / in_cluster; `orb config show --origin` shows where each came from"
                    .into(),
            ),
        }],
    };
    let failed = results.iter().filter(|r| !r.ok).count();
    let opt_outs: Vec<String> = resolved
        .security_opt_outs
        .iter()
        .map(ToString::to_string)
        .collect();
    let warnings: Vec<String> = resolved.warnings.iter().map(ToString::to_string).collect();
    let reply = json!({"provider": entry.name, "checks": results, "failed": failed,
                       "warnings": warnings, "security_opt_outs": opt_outs});
    let text = render::render(&reply, session.global.output, || {
        let mut t = Table::new(vec!["CHECK", "RESULT", "DETAIL", "FIX"]);
        for r in &results {
            t.row(vec![
                r.check.clone(),
                if r.ok { "ok".into() } else { "FAIL".into() },
                r.detail.clone(),
                render::or_dash(r.fix.as_deref()),
            ]);
        }
        t
    })?;
    let mut out = Output::ok(text);
    // Deliberate departures from the secure defaults do not fail the doctor, but it names
    // each one and where it was set.
    out.stderr
        .extend(warnings.iter().map(|w| format!("warning: {w}")));
    out.stderr
        .extend(opt_outs.iter().map(|o| format!("note: {o}")));
    if failed > 0 {
        out.stderr.push(format!(
            "error: {failed} of {} checks failed; each failing row says how to fix it",
            results.len()
        ));
        out.exit = Failure::provider("").code();
    }
    Ok(out)
}
