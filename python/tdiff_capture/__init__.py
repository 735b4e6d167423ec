"""tdiff_capture: hook a PyTorch DeepSeek-V4 model (transformers' DeepseekV4ForCausalLM, or any
implementation through a table of Taps) on a tdiff case and write candidate dumps under tdiff's
stage names: `capture` (the model's own forward) and `isolate` (each stage on the reference's
inputs). Needs torch, numpy and h5py at run time (transformers for the HF model). See
python/README.md."""
__version__ = "0.1.0"
