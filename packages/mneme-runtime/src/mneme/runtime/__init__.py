"""mneme device layer: fixed-address virtual memory on the CUDA VMM API, and the recorder."""
