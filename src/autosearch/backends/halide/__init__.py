"""backends/halide"""
