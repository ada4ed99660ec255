//! kube-fixture
