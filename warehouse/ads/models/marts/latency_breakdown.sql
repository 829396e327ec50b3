with

requests as (

    select * from {{ ref('stg_dwd__requests') }}
    where {{ in_build_days('event_date') }}

),

model_totals as (

    select
        event_date,
        model,
        count(*) as requests

    from requests
    group by event_date, model

),

staged_requests as (

    -- Requests that log every stage: the breakdown is only meaningful over these.
    select * from requests
    where duration_ms is not null
        and queue_ms is not null
        and preprocess_ms is not null
        and inference_ms is not null
        and postprocess_ms is not null

),

stage_stats as (

    select
        event_date,
        model,
        count(*) as staged_requests,
        {{ exact_mean('queue_ms') }} as queue_mean_ms,
        quantile_cont(queue_ms, 0.95) as queue_p95_ms,
        {{ exact_mean('preprocess_ms') }} as preprocess_mean_ms,
        quantile_cont(preprocess_ms, 0.95) as preprocess_p95_ms,
        {{ exact_mean('inference_ms') }} as inference_mean_ms,
        quantile_cont(inference_ms, 0.95) as inference_p95_ms,
        {{ exact_mean('postprocess_ms') }} as postprocess_mean_ms,
        quantile_cont(postprocess_ms, 0.95) as postprocess_p95_ms,
        {{ exact_mean('duration_ms - queue_ms - preprocess_ms - inference_ms - postprocess_ms') }} as overhead_mean_ms,
        {{ exact_mean('duration_ms') }} as duration_mean_ms,
        quantile_cont(duration_ms, 0.95) as duration_p95_ms,
        1 - {{ exact_sum('inference_ms') }} / nullif({{ exact_sum('duration_ms') }}, 0) as outside_inference_share

    from staged_requests
    group by event_date, model

),

final as (

    select
        model_totals.event_date,
        model_totals.model,
        model_totals.requests,
        coalesce(stage_stats.staged_requests, 0) as staged_requests,
        stage_stats.queue_mean_ms,
        stage_stats.queue_p95_ms,
        stage_stats.preprocess_mean_ms,
        stage_stats.preprocess_p95_ms,
        stage_stats.inference_mean_ms,
        stage_stats.inference_p95_ms,
        stage_stats.postprocess_mean_ms,
        stage_stats.postprocess_p95_ms,
        stage_stats.overhead_mean_ms,
        stage_stats.duration_mean_ms,
        stage_stats.duration_p95_ms,
        stage_stats.outside_inference_share,
        stage_stats.outside_inference_share > {{ var('outside_inference_threshold') }} as is_outside_inference_high

    from model_totals
    left join stage_stats
        on model_totals.event_date = stage_stats.event_date
        and model_totals.model = stage_stats.model

)

select * from final
