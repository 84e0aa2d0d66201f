"""A CloudWatch alarm on the FSx file system's own free-capacity metric.

It watches the file system from outside the cluster, so it keeps working when the cluster (or
its Prometheus) does not. Metric: ``AWS/FSx`` ``FreeDataStorageCapacity``, dimension
``FileSystemId``, in bytes ("Amazon FSx for Lustre metrics and dimensions", FSx for Lustre user
guide). The Sum over the file system's storage targets is the free capacity of the whole file
system; aws-cdk-lib 2.275 has no metric method on the L1 file system, hence ``cloudwatch.Metric``.
The alarm has no action: add an SNS action to be told (``alarm.add_alarm_action``).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from trainium_job.checks import whole_number


class FsxCapacityAlarm(Construct):
    """Alarm when less than ``free_percent`` of the file system is free for 15 minutes.

    Attributes: metric, alarm.
    """

    def __init__(
        self, scope: Construct, id: str, *, file_system_id: str, storage_gib: int, free_percent: int = 10
    ) -> None:
        """
        Args:
            file_system_id: the FSx file system (``TrainingFileSystem.file_system_id``).
            storage_gib: its capacity (the threshold is a share of it).
            free_percent: alarm below this share free, 1-99. Default 10.
        """
        super().__init__(scope, id)
        whole_number("free_percent", free_percent, minimum=1, maximum=99)
        self.metric = cloudwatch.Metric(
            namespace="AWS/FSx",
            metric_name="FreeDataStorageCapacity",
            dimensions_map={"FileSystemId": file_system_id},
            statistic="Sum",
            period=Duration.minutes(5),
        )
        self.alarm = self.metric.create_alarm(
            self,
            "Alarm",
            threshold=storage_gib * 1024**3 * free_percent / 100,
            evaluation_periods=3,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            alarm_description=(
                f"FSx for Lustre {file_system_id}: less than {free_percent}% of {storage_gib} GiB free; "
                "delete old runs' checkpoints or grow the file system before a checkpoint write fails"
            ),
        )
