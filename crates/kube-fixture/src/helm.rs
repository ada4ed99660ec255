//! The helm binary for chart tests (`ORB_HELM`, built by `tools/control-plane/build-helm.sh`):
//! run it, render a chart with values into parsed objects, install and uninstall releases on
//! the local control plane. A missing helm fails the test with the command that builds it.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// What one helm run printed.
#[derive(Debug)]
pub struct HelmRun {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// The helm binary from `ORB_HELM`; panics (never skips) when it is missing.
pub fn helm_binary() -> PathBuf {
    let fix = "build it with tools/control-plane/build-helm.sh and run \
               `export ORB_HELM=\"$(tools/control-plane/build-helm.sh | tail -n1)\"`";
    let path = std::env::var_os("ORB_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("ORB_HELM is not set; {fix}"));
    assert!(
        path.is_file(),
        "ORB_HELM={} is not a file; {fix}",
        path.display()
    );
    path
}

/// Runs helm with `args`, feeding `values` (JSON, which is YAML) on stdin for `-f -`.
pub fn helm(args: &[&str], values: Option<&Value>) -> HelmRun {
    let mut child = Command::new(helm_binary())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("helm starts");
    let mut stdin = child.stdin.take().expect("helm's stdin");
    if let Some(values) = values {
        stdin
            .write_all(values.to_string().as_bytes())
            .expect("values written to helm");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("helm runs");
    HelmRun {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `helm template <release> <chart> --namespace <ns> -f <values>`: the raw output, or helm's
/// error text.
pub fn template_text(
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &Value,
) -> Result<String, String> {
    let chart = chart.to_str().expect("chart path is UTF-8");
    let run = helm(
        &[
            "template",
            release,
            chart,
            "--namespace",
            namespace,
            "-f",
            "-",
        ],
        Some(values),
    );
    if run.success {
        Ok(run.stdout)
    } else {
        Err(run.stderr)
    }
}

/// [`template_text`] parsed into objects (empty documents dropped); panics with helm's error.
pub fn render(chart: &Path, release: &str, namespace: &str, values: &Value) -> Vec<Value> {
    let text = template_text(chart, release, namespace, values)
        .unwrap_or_else(|e| panic!("helm template {release} with {values} failed:\n{e}"));
    parse_documents(&text)
}

/// Multi-document YAML into JSON values, without the empty documents.
pub fn parse_documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The object of `kind` named `name`, if rendered.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// A release installed with `helm install --wait` on the cluster of `kubeconfig`;
/// `helm uninstall` when dropped (pass or fail), which also removes its cluster-scoped objects.
pub struct Release {
    pub name: String,
    pub namespace: String,
    kubeconfig: PathBuf,
}

impl Release {
    /// Installs `chart` as `name` into `namespace` with `values`; panics with helm's output
    /// when the install fails.
    pub fn install(
        kubeconfig: &Path,
        chart: &Path,
        name: &str,
        namespace: &str,
        values: &Value,
    ) -> Release {
        let release = Release {
            name: name.to_string(),
            namespace: namespace.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
        };
        let run = helm(
            &[
                "install",
                name,
                chart.to_str().expect("chart path is UTF-8"),
                "--kubeconfig",
                kubeconfig.to_str().expect("kubeconfig path is UTF-8"),
                "--namespace",
                namespace,
                "--wait",
                "--timeout",
                "120s",
                "-f",
                "-",
            ],
            Some(values),
        );
        assert!(
            run.success,
            "helm install {name} into {namespace} failed:\n{}\n{}",
            run.stdout, run.stderr
        );
        release
    }

    /// `helm status`'s JSON.
    pub fn status(&self) -> Value {
        let run = helm(
            &[
                "status",
                &self.name,
                "--kubeconfig",
                self.kubeconfig.to_str().unwrap(),
                "--namespace",
                &self.namespace,
                "-o",
                "json",
            ],
            None,
        );
        assert!(run.success, "helm status {}: {}", self.name, run.stderr);
        serde_json::from_str(&run.stdout).expect("helm status prints JSON")
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = helm(
            &[
                "uninstall",
                &self.name,
                "--kubeconfig",
                self.kubeconfig.to_str().unwrap_or_default(),
                "--namespace",
                &self.namespace,
                "--wait",
            ],
            None,
        );
    }
}

/// An RBAC rule list as a set, each rule with its lists sorted (order carries no meaning), so
/// a rendered Role compares equal to the documented one.
pub fn rule_set(rules: &Value) -> BTreeSet<String> {
    rules
        .as_array()
        .unwrap_or_else(|| panic!("no rules in {rules}"))
        .iter()
        .map(|rule| {
            let mut normal = serde_json::Map::new();
            for (field, list) in rule.as_object().unwrap() {
                let mut items: Vec<String> = list
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                items.sort();
                normal.insert(field.clone(), json!(items));
            }
            Value::Object(normal).to_string()
        })
        .collect()
}
