# NVIDIA's Triton 2.51 image plus what the python-backend models in triton_models/ import:
# DALI (preprocess), torch/torchvision (classifier), cassandra-driver (cassandra_fetch).
# numpy<2: the Triton 2.51 python stub cannot pass BYTES tensors with numpy 2.
FROM nvcr.io/nvidia/tritonserver:24.10-py3
RUN pip install --no-cache-dir "numpy<2" nvidia-dali-cuda120 torch torchvision cassandra-driver
