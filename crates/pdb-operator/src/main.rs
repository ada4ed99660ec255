fn main() {
    print!("{}", pdb_operator::crd::crds_yaml().unwrap());
}
