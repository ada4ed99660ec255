//! pdb-operator library: CRD types, budget math, controllers.
