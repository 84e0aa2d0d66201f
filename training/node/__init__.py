"""What runs against a Trainium node rather than the model: probes before training (the Neuron
driver, :mod:`.driver_check`; the EFA fabric, :mod:`.fabric_check`) and the Prometheus exporters of
the tools image (:mod:`.efa_exporter`, :mod:`.fsx_exporter`).
"""
