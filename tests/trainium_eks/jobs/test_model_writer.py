"""The models in the bucket: the default training stack's pods upload each phase's export, with a
role that may write those runs' model prefixes only, the bucket named in a ConfigMap the pods read."""

from __future__ import annotations

import json
from typing import Any

from tests.support import k8s_manifests, resources, submitted_jobs
from trainium_job.paths import MODEL_BUCKET_CONFIG_MAP, MODEL_BUCKET_ENV, MODEL_BUCKET_KEY, model_commands
from trainium_job.pod_program import loads

RUNS = ("bert-large-phase1", "bert-large-phase2")
#: The platform's bucket as the training stack reads it (a weak cross-stack reference).
BUCKET = {
    "Fn::GetStackOutput": {
        "StackName": "trn-bert-platform",
        "Region": "us-west-2",
        "OutputName": "WorkloadModelBucketName",
    }
}


def _object_arn(run: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:aws:s3:::", BUCKET, f"/{run}/model/*"]]}


def test_given_the_default_stack_then_each_phase_exports_then_uploads_to_its_runs_model_prefix(training_json):
    (job,) = submitted_jobs(training_json)
    (container,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    described = loads(container["command"][-1])
    uploads = [(p.export.model_dir, p.export.upload) for p in described.phases if p.export is not None]
    assert [(model_dir, u.prefix if u else None) for model_dir, u in uploads] == [
        (f"/data/runs/{run}/model", f"{run}/model") for run in RUNS
    ]
    assert all(u is not None and u.bucket_env == MODEL_BUCKET_ENV for _, u in uploads)
    assert all(
        u is not None and u.argv == ("python", "-m", "training.trainer.upload_model") for _, u in uploads
    )
    # The bucket's name from the ConfigMap, not in the job (a token would change the job's name).
    (bucket_env,) = [e for e in container["env"] if e["name"] == MODEL_BUCKET_ENV]
    # Kubernetes API, EnvVarSource.configMapKeyRef (ConfigMapKeySelector: name, key, optional).
    assert bucket_env["valueFrom"] == {
        "configMapKeyRef": {"name": MODEL_BUCKET_CONFIG_MAP, "key": MODEL_BUCKET_KEY, "optional": True}
    }
    assert "Fn::GetStackOutput" not in json.dumps(job)


def test_given_the_default_stack_then_the_configmap_names_the_platforms_bucket_before_the_job(training_json):
    ((config_id, config_map),) = [
        (lid, o)
        for lid, o in k8s_manifests(training_json)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == MODEL_BUCKET_CONFIG_MAP
    ]
    assert config_map["metadata"]["namespace"] == "training"
    raw = json.dumps(training_json["Resources"][config_id]["Properties"]["Manifest"])
    assert "WorkloadModelBucketName" in raw and MODEL_BUCKET_KEY in config_map["data"]
    (submitter_id,) = [
        lid
        for lid, o in k8s_manifests(training_json)
        if o["kind"] == "Job" and o["metadata"]["labels"].get("app.kubernetes.io/name") == "job-submitter"
    ]
    assert config_id in training_json["Resources"][submitter_id]["DependsOn"]


def test_given_the_default_stack_then_the_pods_role_writes_only_its_runs_model_prefixes(training_json):
    (association,) = [
        a["Properties"]
        for a in resources(training_json, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "bert-trainer"
    ]
    assert association["Namespace"] == "training"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in resources(training_json, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = policy["Statement"]
    # Service Authorization Reference, Amazon S3: PutObject covers CreateMultipartUpload, UploadPart
    # and CompleteMultipartUpload; GetObject covers HeadObject; ListBucket covers ListObjectsV2.
    objects = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert all(
        sorted(s["Action"]) == ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"] for s in objects
    )
    assert sorted(json.dumps(r, sort_keys=True) for s in objects for r in _list(s["Resource"])) == sorted(
        json.dumps(_object_arn(run), sort_keys=True) for run in RUNS
    )
    listing = [s for s in statements if s["Action"] == "s3:ListBucket"]
    prefixes = sorted(p for s in listing for p in s["Condition"]["StringLike"]["s3:prefix"])
    assert prefixes == sorted(f"{run}/model/*" for run in RUNS)
    assert not [a for s in statements for a in _list(s["Action"]) if "Delete" in a or a == "s3:*"]


def test_given_the_default_stack_then_its_outputs_give_each_models_uri_and_the_commands_to_load_it(
    training_json,
):
    outputs = {k: v for k, v in training_json["Outputs"].items() if "ModelWriterModel" in k}
    assert len(outputs) == 2 * len(RUNS)
    fetch, load = model_commands("s3://BUCKET/bert-large-phase2/model/", "bert-large-phase2-model")
    rendered = {k: json.dumps(v["Value"]) for k, v in outputs.items()}
    (phase2,) = [v for k, v in rendered.items() if k.startswith("TrainingModelWriterModel2Fetch")]
    assert (
        "aws s3 cp --recursive s3://" in phase2
        and "BertForPreTraining.from_pretrained('bert-large-phase2-model')" in phase2
    )
    assert fetch.startswith("aws s3 cp --recursive") and "from_pretrained" in load


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
