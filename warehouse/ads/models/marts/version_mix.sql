with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date') }}

),

version_counts as (

    select
        event_date,
        model,
        model_version,
        count(*) as requests,
        count(distinct prompt_template_version) as template_versions,
        count(distinct pipeline_version) as pipeline_versions

    from requests
    group by event_date, model, model_version

),

ranked_versions as (

    select
        *,
        cast(sum(requests) over model_day as bigint) as model_requests,
        requests / sum(requests) over model_day as traffic_share,
        row_number() over (partition by event_date, model order by requests desc, model_version) as traffic_rank

    from version_counts
    window model_day as (partition by event_date, model)

),

final as (

    select
        event_date,
        model,
        any_value(model_requests) as requests,
        count(*) as versions_serving,
        list(model_version order by traffic_rank) as versions,
        list(requests order by traffic_rank) as version_requests,
        list(traffic_share order by traffic_rank) as version_shares,
        arg_min(model_version, traffic_rank) as top_version,
        max(traffic_share) as top_version_share,
        count(*) > 1 as is_mixed,
        coalesce(
            list(model_version order by model_version) filter (where template_versions > 1), []
        ) as template_mismatch_versions,
        bool_or(template_versions > 1) as is_template_mismatch,
        coalesce(
            list(model_version order by model_version) filter (where pipeline_versions > 1), []
        ) as pipeline_mismatch_versions,
        bool_or(pipeline_versions > 1) as is_pipeline_mismatch

    from ranked_versions
    group by event_date, model

)

select * from final
