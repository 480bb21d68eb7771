"""Native linear formats (issue 13). Importing this package registers them with kernels.formats.register;
the plan never names them. Empty until the native kernels land."""
