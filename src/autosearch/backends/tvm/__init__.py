"""backends/tvm"""
