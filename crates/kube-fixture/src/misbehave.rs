//! Pods that misbehave as production pods do: readiness that flaps, containers that restart or
//! crash-loop and recover, pods marked for disruption. Each step acts as the kubelet would, by
//! writing the pod's status subresource with the admin client, as KWOK's stages do. KWOK
//! leaves a Running pod's status alone (our pod stages match Pending pods or pods that asked
//! for a failure by annotation; tools/control-plane/stages/README.md), so a step's status
//! stays until the next step; a Job's pod that is Running and Ready still completes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// How a container ended before its restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exited with this code (reason `Error`).
    Error(i32),
    /// Killed for memory: exit code 137, reason `OOMKilled`.
    OomKilled,
}

impl Exit {
    fn code_and_reason(self) -> (i32, &'static str) {
        match self {
            Exit::Error(code) => (code, "Error"),
            Exit::OomKilled => (137, "OOMKilled"),
        }
    }
}

/// One pod, played by a kubelet that misbehaves on request. Every step changes the first
/// container (a host's pod has one) and returns the pod as written.
pub struct Kubelet {
    pods: Api<Pod>,
    name: String,
}

impl Kubelet {
    /// Acts on pod `name` of `namespace`; `admin` must be allowed to update `pods/status`
    /// (the fixture's admin client, never the identity under test).
    pub fn of(admin: &Client, namespace: &str, name: &str) -> Self {
        Self {
            pods: Api::namespaced(admin.clone(), namespace),
            name: name.to_string(),
        }
    }

    /// Ready (or not): the `Ready` and `ContainersReady` conditions and every container's
    /// `ready`, as a readiness probe passing or failing sets them. The phase stays Running.
    pub async fn set_ready(&self, ready: bool) -> Pod {
        self.write(|status| {
            for c in containers(status) {
                c.ready = ready;
            }
            set_readiness(status, ready);
        })
        .await
    }

    /// Only the pod's `Ready` condition, without a reason, containers untouched: what the
    /// node lifecycle controller writes to the pods of a node that stopped reporting, and
    /// what the kubelet sets back once its node reports again.
    pub async fn set_ready_condition(&self, ready: bool) -> Pod {
        self.write(|status| set_condition(status, "Ready", ready, None, None))
            .await
    }

    /// Readiness that flaps `times` times: not Ready for `period`, then Ready again for
    /// `period`.
    pub async fn flap_readiness(&self, period: Duration, times: u32) {
        for _ in 0..times {
            self.set_ready(false).await;
            tokio::time::sleep(period).await;
            self.set_ready(true).await;
            tokio::time::sleep(period).await;
        }
    }

    /// The container ended with `exit` and was restarted: `restartCount` one higher,
    /// `lastState.terminated` with the exit, Running and Ready again.
    pub async fn restart(&self, exit: Exit) -> Pod {
        self.write(|status| {
            let c = first_container(status);
            c.last_state = Some(terminated(c, exit));
            c.restart_count += 1;
            start(c);
            set_readiness(status, true);
        })
        .await
    }

    /// The container crashed again and waits in `CrashLoopBackOff`: not Ready, the restart
    /// counted, the phase still Running.
    pub async fn crash_loop(&self) -> Pod {
        self.write(|status| {
            let c = first_container(status);
            c.last_state = Some(terminated(c, Exit::Error(1)));
            c.restart_count += 1;
            c.ready = false;
            c.started = Some(false);
            c.state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    message: Some(format!(
                        "back-off 10s restarting failed container={} (simulated)",
                        c.name
                    )),
                }),
                ..ContainerState::default()
            });
            set_readiness(status, false);
        })
        .await
    }

    /// The back-off is over and the container runs and is Ready again (a new start, so the
    /// restart is counted).
    pub async fn recover(&self) -> Pod {
        self.write(|status| {
            let c = first_container(status);
            c.restart_count += 1;
            start(c);
            set_readiness(status, true);
        })
        .await
    }

    /// The `DisruptionTarget` condition with `reason` (`EvictionByEvictionAPI`,
    /// `PreemptionByScheduler`, `DeletionByTaintManager`, `TerminationByKubelet`), as the
    /// control plane sets it just before it removes the pod.
    pub async fn disruption_target(&self, reason: &str) -> Pod {
        self.write(|status| {
            set_condition(status, "DisruptionTarget", true, Some(reason), None);
        })
        .await
    }

    /// Reads the pod, changes its status and writes it back, again on a conflict (a
    /// controller or KWOK wrote the pod in between).
    async fn write(&self, change: impl Fn(&mut PodStatus)) -> Pod {
        let name = &self.name;
        for _ in 0..10 {
            let mut pod = self.pods.get(name).await.unwrap_or_else(|e| {
                panic!("reading pod {name} to change its status: {e}");
            });
            change(pod.status.get_or_insert_default());
            match self
                .pods
                .replace_status(name, &PostParams::default(), &pod)
                .await
            {
                Ok(written) => return written,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => panic!(
                    "writing the status of pod {name}: {e} (the client needs update on \
                     pods/status: use the fixture's admin client)"
                ),
            }
        }
        panic!("the status of pod {name} kept changing under 10 writes in a row");
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

fn containers(status: &mut PodStatus) -> impl Iterator<Item = &mut ContainerStatus> {
    status.container_statuses.iter_mut().flatten()
}

fn first_container(status: &mut PodStatus) -> &mut ContainerStatus {
    containers(status)
        .next()
        .expect("the pod has no container status yet: wait until it runs before misbehaving")
}

/// How `c`'s current run ended.
fn terminated(c: &ContainerStatus, exit: Exit) -> ContainerState {
    let (exit_code, reason) = exit.code_and_reason();
    let started_at = c
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone());
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.into()),
            started_at,
            finished_at: Some(now()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

fn start(c: &mut ContainerStatus) {
    c.ready = true;
    c.started = Some(true);
    c.state = Some(ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(now()),
        }),
        ..ContainerState::default()
    });
}

fn set_readiness(status: &mut PodStatus, ready: bool) {
    let (reason, message) = if ready {
        (None, None)
    } else {
        let names: Vec<&str> = status
            .container_statuses
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                names.join(" ")
            )),
        )
    };
    for type_ in ["Ready", "ContainersReady"] {
        set_condition(status, type_, ready, reason, message.clone());
    }
}

fn set_condition(
    status: &mut PodStatus,
    type_: &str,
    value: bool,
    reason: Option<&str>,
    message: Option<String>,
) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_default();
    let at = match conditions.iter().position(|c| c.type_ == type_) {
        Some(at) => at,
        None => {
            conditions.push(PodCondition {
                type_: type_.into(),
                ..PodCondition::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[at];
    if c.status != value {
        c.last_transition_time = Some(now());
    }
    c.status = value.into();
    c.reason = reason.map(str::to_string);
    c.message = message;
}
