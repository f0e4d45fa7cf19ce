"""Generated code for the siding delivery contract (proto/siding/v1). Do not edit."""
